"""A session's files as the API handles them: uploaded, listed with their kinds, downloaded, deleted;
and, at start-up, the bytes nothing references any more dropped."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fleet_rlm.service.files import SessionFiles, stored_path
from fleet_rlm.store import Conflict, FileRecord, NotFound, Store, StoreError
from fleet_rlm.workspace.kinds import FileKind


class FileService:
    def __init__(self, store: Store, files: SessionFiles, upload_limit_mb: int) -> None:
        self._store = store
        self._files = files
        self._upload_limit = upload_limit_mb * 1024 * 1024

    async def upload(
        self, session_ref: str, rel: str, source: Any, *, declared_type: str | None = None
    ) -> tuple[FileRecord, FileKind]:
        """Store ``source`` at ``files/<rel>`` (replacing what was there); returns it and its kind."""
        session = await self._store.get_session(session_ref)
        try:
            record = await asyncio.to_thread(
                self._files.store_upload, session.id, rel, source, self._upload_limit, declared_type
            )
            await self._files.share(session.id, [record.sha256])
            stored = await self._store.put_file(session.id, record)
        except (FileNotFoundError, NotFound, Conflict) as exc:
            raise await self._upload_cut_short(session_ref, session.id, exc) from exc
        return stored, await asyncio.to_thread(self._files.kind, session.id, stored)

    async def _upload_cut_short(self, session_ref: str, session_id: str, exc: Exception) -> StoreError:
        """Why an upload's bytes or record could not be stored: its session was deleted meanwhile
        (deleting removes the session's blob directory, the upload's staging file with it; what the
        upload wrote after that is removed here), or it changed under the upload."""
        try:
            await self._store.get_session(session_id)
        except NotFound:
            await asyncio.to_thread(self._files.blobs.remove_session, session_id)
            return NotFound("session", session_ref)
        if isinstance(exc, StoreError):
            return exc
        return Conflict(
            "the session's files changed while the upload was stored; send it again", code="upload_conflict"
        )

    async def in_session(self, session_ref: str) -> list[tuple[FileRecord, FileKind]]:
        """The session's files, each with its kind."""
        session = await self._store.get_session(session_ref)
        records = await self._store.list_files(session.id)
        return list(zip(records, await self._files.kinds(session.id, records), strict=True))

    async def download(self, session_ref: str, rel: str) -> tuple[FileRecord, Path]:
        """The file at ``rel`` and where its bytes are on this machine (fetched from the shared store)."""
        path = stored_path(rel)
        session = await self._store.get_session(session_ref)
        record = await self._store.get_file(session.id, path)
        await self._files.fetch_records(session.id, [record])
        blob = self._files.blob_path(session.id, record)
        if not await asyncio.to_thread(blob.is_file):  # the session is being deleted
            raise NotFound("file", path)
        return record, blob

    async def delete(self, session_ref: str, rel: str) -> FileRecord:
        """Forget a file; its bytes are dropped at the next start-up if nothing else uses them."""
        path = stored_path(rel)
        session = await self._store.get_session(session_ref)
        return await self._store.delete_file(session.id, path)

    async def collect_garbage(self) -> None:
        """Drop the bytes of deleted sessions, and those no file, artifact or replay references."""
        blobs = self._files.blobs
        known = await self._store.session_ids()
        for session_id in blobs.session_ids():
            if session_id not in known:
                await asyncio.to_thread(blobs.remove_session, session_id)
            else:
                keep = await self._kept_blobs(session_id)
                await asyncio.to_thread(blobs.collect_garbage, session_id, keep)
                await self._files.share_unshared(session_id, keep)
        if self._files.shared is not None:
            for session_id, digests in (await self._files.shared.stale()).items():
                keep = await self._kept_blobs(session_id)
                await self._files.shared.drop(session_id, [sha256 for sha256 in digests if sha256 not in keep])

    async def _kept_blobs(self, session_id: str) -> set[str]:
        return await self._store.referenced_blobs(session_id) | await self._store.replay_blobs(session_id)
