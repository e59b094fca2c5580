"""What the store's query groups share: the database and a few helpers used inside transactions."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Row, delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.store.database import Database
from fleet_rlm.store.errors import Invalid, NotFound
from fleet_rlm.store.records import FileChanges
from fleet_rlm.store.tables import FILE_ORIGINS, EventRow, FileRow, SessionRow, utcnow


def event_row(event: Event) -> dict[str, Any]:
    return {
        "turn_id": event.turn_id,
        "seq": event.seq,
        "type": event.type.value,
        "ts": event.ts,
        "span_id": event.span_id,
        "parent_span_id": event.parent_span_id,
        "data": event.data,
    }


def event_of(row: EventRow | Row[Any]) -> Event:
    """The event of a stored row (mapped, or as a Core statement returns it)."""
    return Event(
        type=EventType(row.type),
        seq=row.seq,
        turn_id=row.turn_id,
        ts=row.ts,
        span_id=row.span_id,
        parent_span_id=row.parent_span_id,
        data=dict(row.data or {}),
    )


SQLITE_IDS_PER_STATEMENT = 500
"""Ids one ``IN (...)`` names at most on SQLite, well under its limit on a statement's parameters."""


def id_chunks(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    """``ids`` in slices of :data:`SQLITE_IDS_PER_STATEMENT`, one ``IN (...)`` statement each."""
    for start in range(0, len(ids), SQLITE_IDS_PER_STATEMENT):
        yield ids[start : start + SQLITE_IDS_PER_STATEMENT]


class StoreBase:
    def __init__(self, database: Database) -> None:
        self.db = database

    async def _session_row(self, session: AsyncSession, ref: str) -> SessionRow:
        row = await session.get(SessionRow, ref)
        if row is None:
            row = (await session.execute(select(SessionRow).where(SessionRow.name == ref))).scalar_one_or_none()
        if row is None:
            raise NotFound("session", ref)
        return row

    async def _touch_session(self, session: AsyncSession, session_id: str) -> None:
        await session.execute(update(SessionRow).where(SessionRow.id == session_id).values(updated_at=utcnow()))

    async def _apply_file_changes(
        self, session: AsyncSession, session_id: str, changes: FileChanges, turn_id: str | None
    ) -> None:
        now = utcnow()
        for record in changes.upserts:
            if record.origin not in FILE_ORIGINS:
                raise Invalid(f"file origin {record.origin!r} is not one of {FILE_ORIGINS}")
            row = await session.get(FileRow, (session_id, record.path))
            if row is None:
                row = FileRow(session_id=session_id, path=record.path, created_at=now)
                session.add(row)
            row.size = record.size
            row.sha256 = record.sha256
            row.media_type = record.media_type
            row.origin = record.origin
            row.turn_id = record.turn_id or turn_id
            row.updated_at = now
        if changes.deletions:
            await session.execute(
                delete(FileRow).where(FileRow.session_id == session_id, FileRow.path.in_(changes.deletions))
            )
