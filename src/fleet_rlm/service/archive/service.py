"""Sessions in and out of the service as portable archives."""

from __future__ import annotations

from typing import IO

from fleet_rlm.config import Settings
from fleet_rlm.service.archive.sessions import export_session, import_session
from fleet_rlm.service.files import SessionFiles
from fleet_rlm.store import SessionRecord, Store


class ArchiveService:
    def __init__(self, store: Store, files: SessionFiles, settings: Settings) -> None:
        self._store = store
        self._files = files
        self._settings = settings

    async def export(self, ref: str, destination: IO[bytes]) -> SessionRecord:
        """Write the session's portable archive (history, events, files, artifacts, the memory its turns proposed)."""
        return await export_session(self._store, self._files, ref, destination)

    async def restore(self, source: IO[bytes], *, name: str | None = None) -> SessionRecord:
        """Import an archive as a new session under a new id; its memory entries wait for review again."""
        return await import_session(
            self._store, self._files, source, self._settings.server, self._settings.memory, name=name
        )
