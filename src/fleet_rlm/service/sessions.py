"""Sessions as the service keeps them: created under a unique name or not, listed, changed, deleted with
everything they hold."""

from __future__ import annotations

import asyncio
from typing import Any

from fleet_rlm.config import Ceilings
from fleet_rlm.protocol.ids import is_session_id
from fleet_rlm.service.files import SessionFiles
from fleet_rlm.service.kernels.service import KernelService
from fleet_rlm.store import Conflict, NotFound, SessionRecord, Store
from fleet_rlm.store.session_settings import check_session_settings


class SessionService:
    def __init__(self, store: Store, files: SessionFiles, kernels: KernelService, ceilings: Ceilings) -> None:
        self._store = store
        self._files = files
        self._kernels = kernels
        self._ceilings = ceilings

    async def create(
        self,
        *,
        name: str | None = None,
        title: str | None = None,
        mode: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> SessionRecord:
        checked = check_session_settings(settings, self._ceilings)
        if mode is not None:
            check_session_settings({"mode": mode}, self._ceilings)
        return await self._store.create_session(name=name, title=title, mode=mode, settings=checked)

    async def get(self, ref: str) -> SessionRecord:
        """The session with id or unique name ``ref``; raises NotFound."""
        return await self._store.get_session(ref)

    async def open(self, ref: str) -> SessionRecord:
        """The session with id or name ``ref``, created under that name when no session has it (an
        unknown id is not created: NotFound)."""
        try:
            return await self._store.get_session(ref)
        except NotFound:
            if is_session_id(ref):
                raise
        try:
            return await self._store.create_session(name=ref)
        except Conflict:  # created meanwhile by another call
            return await self._store.get_session(ref)

    async def recent(self, *, limit: int = 50, offset: int = 0) -> list[SessionRecord]:
        """Sessions, most recently active first."""
        return await self._store.list_sessions(limit=limit, offset=offset)

    async def update(self, ref: str, **changes: Any) -> SessionRecord:
        if "settings" in changes:
            changes["settings"] = check_session_settings(changes["settings"], self._ceilings)
        if changes.get("mode") is not None:
            check_session_settings({"mode": changes["mode"]}, self._ceilings)
        return await self._store.update_session(ref, **changes)

    async def delete(self, ref: str) -> SessionRecord:
        """Delete the session with its turns, files, kernel and bytes."""
        record = await self._store.delete_session(ref)
        await self._kernels.forget(record.id)
        await asyncio.to_thread(self._files.blobs.remove_session, record.id)
        if self._files.shared is not None:
            await self._files.shared.remove_session(record.id)
        return record
