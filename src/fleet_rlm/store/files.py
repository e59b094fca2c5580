"""Session files: metadata of uploads, artifacts and memory files (bytes live in the blob store)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from fleet_rlm.store.base import StoreBase
from fleet_rlm.store.errors import Conflict, NotFound
from fleet_rlm.store.records import FileChanges, FileRecord
from fleet_rlm.store.tables import FileRow


class FileQueries(StoreBase):
    async def list_files(self, session_id: str) -> list[FileRecord]:
        query = select(FileRow).where(FileRow.session_id == session_id).order_by(FileRow.path)
        async with self.db.read() as session:
            return [FileRecord.of(row) for row in (await session.execute(query)).scalars()]

    async def get_file(self, session_id: str, path: str) -> FileRecord:
        async with self.db.read() as session:
            row = await session.get(FileRow, (session_id, path))
            if row is None:
                raise NotFound("file", path)
            return FileRecord.of(row)

    async def put_file(self, session_id: str, record: FileRecord) -> FileRecord:
        """Record an uploaded file; NotFound if the session is gone, Conflict if it or the file changed
        meanwhile (PostgreSQL fails the commit on the file row's keys then)."""
        try:
            async with self.db.write() as session:
                await self._session_row(session, session_id)
                await self._apply_file_changes(session, session_id, FileChanges(upserts=[record]), record.turn_id)
                await self._touch_session(session, session_id)
                row = await session.get(FileRow, (session_id, record.path))
                assert row is not None
                stored = FileRecord.of(row)
        except IntegrityError as exc:
            raise Conflict(
                f"the session or its file {record.path!r} changed meanwhile", code="upload_conflict"
            ) from exc
        return stored

    async def delete_file(self, session_id: str, path: str) -> FileRecord:
        async with self.db.write() as session:
            row = await session.get(FileRow, (session_id, path))
            if row is None:
                raise NotFound("file", path)
            record = FileRecord.of(row)
            await session.delete(row)
            await self._touch_session(session, session_id)
        return record

    async def referenced_blobs(self, session_id: str) -> set[str]:
        query = select(FileRow.sha256).where(FileRow.session_id == session_id)
        async with self.db.read() as session:
            return set((await session.execute(query)).scalars())
