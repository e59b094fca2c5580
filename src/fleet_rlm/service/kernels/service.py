"""The sandboxes a service keeps: its backend, the warm pool and the sessions' kernels, each built when
first needed (a replica that runs no turns never starts a sandbox)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from fleet_rlm.config import Settings
from fleet_rlm.sandbox.base import SandboxBackend, SandboxLimits, SandboxUnavailable
from fleet_rlm.sandbox.registry import configured_backend
from fleet_rlm.service.kernels.pool import SandboxPool
from fleet_rlm.service.kernels.registry import KernelRegistry, KernelStatus
from fleet_rlm.store import Conflict, Store
from fleet_rlm.store.runners import is_dead

log = logging.getLogger(__name__)


class KernelService:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        runner: str,
        *,
        backend: SandboxBackend | None = None,
        sessions_root: Path,
        on_sqlite: bool,
    ) -> None:
        self._settings = settings
        self._store = store
        self._runner = runner
        self._backend = backend
        self._sessions_root = sessions_root
        self._on_sqlite = on_sqlite
        self._pool: SandboxPool | None = None
        self._registry: KernelRegistry | None = None

    @property
    def backend(self) -> SandboxBackend:
        if self._backend is None:
            self._backend = configured_backend(self._settings)
        return self._backend

    @property
    def pool(self) -> SandboxPool:
        """The warm pool every turn's sandbox comes from."""
        if self._pool is None:
            self._pool = SandboxPool(
                self.backend,
                self._settings.data_dir / "sandboxes",
                self._settings.sandbox.pool_size,
                SandboxLimits.from_settings(self._settings.sandbox, self._settings.budget),
                self._runner,
            )
        return self._pool

    @property
    def pool_if_built(self) -> SandboxPool | None:
        return self._pool

    @property
    def registry(self) -> KernelRegistry:
        """The session kernels this process keeps live between turns (docs/kernels.md)."""
        if self._registry is None:
            self._registry = KernelRegistry(
                self.pool, self._sessions_root, self._settings.sandbox, existing=self._store.existing_sessions
            )
        return self._registry

    @property
    def affinity_seconds(self) -> float:
        """How long a queued turn is left to the runner keeping its session's kernel (0: on SQLite,
        one process runs every turn; and without kernels there is nothing to keep)."""
        if self._on_sqlite or not self.registry.enabled:
            return 0.0
        return self._settings.worker.kernel_affinity_seconds

    async def status(self, ref: str) -> KernelStatus:
        """The session's kernel: live or not, since when, idle for, memory, variables, snapshot."""
        session = await self._store.get_session(ref)
        await self.registry.settled(session.id)
        return await asyncio.to_thread(self.registry.status, session.id)

    async def summary(self) -> tuple[int, int]:
        """How many session kernels are live in this process, and their resident memory in bytes."""
        return await self._registry.summary() if self._registry is not None else (0, 0)

    async def restart(self, ref: str) -> KernelStatus:
        """End the session's kernel and drop its snapshot (Conflict while a turn runs on it): here at
        once; in another process that keeps it (a worker), before the session's next turn there."""
        session = await self._store.get_session(ref)
        await self._store.reset_kernel(session.id)
        # Busy here only while its turn, ended in the database, lets go of it: ended before the next turn.
        with contextlib.suppress(Conflict):
            await self.registry.restart(session.id)
        return await asyncio.to_thread(self.registry.status, session.id)

    async def forget(self, session_id: str) -> None:
        """The session was deleted: its kernel here, if any, ends."""
        if self._registry is not None:
            await self._registry.forget(session_id)

    async def start(self) -> list[dict[str, Any]]:
        """Reap the sandboxes dead runners left, build what sandboxes need, warm the pool and start
        keeping kernels; returns what was reaped."""
        reaped = self.pool.reap(lambda runner: is_dead(runner, self._runner))
        await self._prepare_backend()
        self.pool.start()
        self.registry.start()
        return reaped

    async def _prepare_backend(self) -> None:
        """Build what sandboxes need (the sandbox environment) before the pool starts any; a failure is
        logged and each sandbox then reports it."""
        try:
            await asyncio.to_thread(self.backend.prepare)
        except SandboxUnavailable as exc:
            log.error("sandboxes cannot start: %s", exc)

    async def close(self) -> None:
        if self._registry is not None:
            await self._registry.close()
        if self._pool is not None:
            await self._pool.close()
