"""What the store's query groups share: the database and a few helpers used inside transactions."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, delete, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.store.database import Database
from fleet_rlm.store.errors import Invalid, NotFound
from fleet_rlm.store.records import FileChanges, TurnRecord
from fleet_rlm.store.tables import FILE_ORIGINS, TURNS, EventRow, FileRow, SessionRow, utcnow


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


async def read_turn(connection: AsyncConnection, turn_id: str) -> TurnRecord:
    """The turn ``turn_id`` as stored (a Core read); raises NotFound."""
    row = (await connection.execute(select(TURNS).where(TURNS.c.id == turn_id))).one_or_none()
    if row is None:
        raise NotFound("turn", turn_id)
    return TurnRecord.of(row)


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
