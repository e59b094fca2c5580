"""What evaluation and optimization keep in the service: gold labels, candidate and approved programs,
the replay snapshots of captured turns, and sandboxes to replay them in."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fleet_rlm.engine.program import ProgramSpec
from fleet_rlm.protocol.events import new_id
from fleet_rlm.service.files import SessionFiles
from fleet_rlm.service.kernels.pool import Lease
from fleet_rlm.service.kernels.service import KernelService
from fleet_rlm.service.memory import MEMORY_FILE
from fleet_rlm.service.turns.programs import served_program
from fleet_rlm.service.turns.replays import ReplaySnapshot
from fleet_rlm.store import LabelRecord, NotFound, ProgramRecord, Store


class ReplayUnavailable(Exception):
    """The snapshot cannot be restored (an input file's bytes are gone); the message says which."""


class QualityData:
    def __init__(self, store: Store, files: SessionFiles, kernels: KernelService) -> None:
        self._store = store
        self._files = files
        self._kernels = kernels

    # Labels -----------------------------------------------------------------------------------

    async def labels(self, *, session_id: str | None = None, groups: list[str] | None = None) -> list[LabelRecord]:
        return await self._store.list_labels(session_id=session_id, groups=groups)

    async def label(self, ref: str) -> LabelRecord:
        return await self._store.get_label(ref)

    async def add_label(self, **label: Any) -> LabelRecord:
        """Store a reviewed label (the fields of :meth:`fleet_rlm.store.Store.add_label`)."""
        return await self._store.add_label(**label)

    async def delete_label(self, ref: str) -> LabelRecord:
        return await self._store.delete_label(ref)

    # Programs ---------------------------------------------------------------------------------

    async def programs(self) -> list[ProgramRecord]:
        return await self._store.list_programs()

    async def program(self, version: str) -> ProgramRecord:
        return await self._store.get_program(version)

    async def serving(self) -> ProgramSpec:
        """The program the next turn runs: the newest approved one, or the built-in program."""
        return await served_program(self._store)

    async def next_program_version(self) -> str:
        return await self._store.next_program_version()

    async def add_program(self, version: str, content: str, sha256: str, report: dict[str, Any]) -> ProgramRecord:
        """Store a candidate program."""
        return await self._store.add_program(version, content, sha256, report)

    async def approve_program(self, version: str, *, incumbent: str | None) -> ProgramRecord:
        return await self._store.approve_program(version, incumbent=incumbent)

    async def retire_program(self) -> ProgramRecord:
        """Retire the approved program serving now (the one before it, or the built-in, serves next)."""
        return await self._store.retire_active_program()

    # Replays ----------------------------------------------------------------------------------

    async def snapshot(self, turn_id: str) -> ReplaySnapshot:
        """The inputs the turn was captured with; raises NotFound when it ran without ``capture_replays``."""
        return ReplaySnapshot.model_validate((await self._store.get_replay(turn_id)).snapshot)

    async def captured(self, turn_id: str) -> bool:
        """Whether the turn ran with ``capture_replays`` (a snapshot of its inputs is stored)."""
        try:
            await self._store.get_replay(turn_id)
        except NotFound:
            return False
        return True

    @asynccontextmanager
    async def replay_sandbox(self, snapshot: ReplaySnapshot) -> AsyncIterator[tuple[str, Lease]]:
        """A sandbox from the pool holding the snapshot's input files and memory, and the replay's id;
        raises ReplayUnavailable when an input is no longer stored."""
        session_id = snapshot.session_id
        await self._files.fetch(session_id, (item.sha256 for item in snapshot.files))
        blobs = self._files.blobs
        for item in snapshot.files:
            if not blobs.path(session_id, item.sha256).is_file():
                raise ReplayUnavailable(f"input file {item.path} (sha256 {item.sha256[:12]}…) is no longer stored")
        replay_id = new_id("replay")
        lease = await self._kernels.pool.acquire(session_id, replay_id)
        try:
            for item in snapshot.files:
                await asyncio.to_thread(lease.files.push, blobs.path(session_id, item.sha256), item.path)
            if snapshot.memory is not None:
                await asyncio.to_thread(lease.files.push, io.BytesIO(snapshot.memory.encode()), MEMORY_FILE)
            yield replay_id, lease
        finally:
            await self._kernels.pool.release(lease)
