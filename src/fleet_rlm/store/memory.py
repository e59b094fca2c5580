"""Reviewed memory: proposals turns make, the person's reviews, and the approved entries turns are shown.

Each proposal is its own row, inserted in its own transaction the moment a turn makes it, so turns
running at the same time never overwrite each other's proposals. On PostgreSQL an advisory lock
serializes proposals (SQLite's writers are serialized already), so the pending cap and the check
for a proposal already made hold exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy import text as sql
from sqlalchemy.ext.asyncio import AsyncSession

from fleet_rlm.protocol.events import new_id
from fleet_rlm.store.base import StoreBase
from fleet_rlm.store.errors import Conflict, Invalid, NotFound
from fleet_rlm.store.records import MemoryRecord
from fleet_rlm.store.tables import MEMORY_STATUSES, MemoryRow, utcnow

MEMORY_ID_PREFIX = "mem"
_PROPOSAL_LOCK_ID = 0x46_4C_4D_45_4D  # "FLMEM"


class MemoryQueries(StoreBase):
    async def propose_memory(
        self, text: str, why: str, *, session_id: str | None, turn_id: str | None, max_pending: int
    ) -> tuple[MemoryRecord, bool]:
        """Store ``text`` as a pending proposal; returns it and True. When an entry with the same text
        exists (pending, approved or rejected), nothing is stored: that entry and False. Raises
        ``memory_queue_full`` when ``max_pending`` proposals already wait for review."""
        async with self.db.write() as session:
            if not self.db.is_sqlite:
                await session.execute(sql("SELECT pg_advisory_xact_lock(:id)"), {"id": _PROPOSAL_LOCK_ID})
            same = await session.scalar(
                select(MemoryRow).where(MemoryRow.text == text).order_by(MemoryRow.created_at).limit(1)
            )
            if same is not None:
                return MemoryRecord.of(same), False
            pending = await session.scalar(
                select(func.count()).select_from(MemoryRow).where(MemoryRow.status == "pending")
            )
            if (pending or 0) >= max_pending:
                raise Conflict(
                    f"{pending} proposals already wait for the person's review (the most is {max_pending})",
                    code="memory_queue_full",
                )
            row = MemoryRow(
                id=new_id(MEMORY_ID_PREFIX),
                text=text,
                why=why,
                status="pending",
                session_id=session_id,
                turn_id=turn_id,
                created_at=utcnow(),
            )
            session.add(row)
        return MemoryRecord.of(row), True

    async def list_memories(
        self, *, status: str | None = None, session_id: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[MemoryRecord]:
        """Entries, oldest proposal first; only those of ``status`` / from ``session_id`` when given."""
        query = select(MemoryRow)
        if status is not None:
            query = query.where(MemoryRow.status == _status(status))
        if session_id is not None:
            query = query.where(MemoryRow.session_id == session_id)
        query = query.order_by(MemoryRow.created_at, MemoryRow.id).limit(limit).offset(offset)
        async with self.db.read() as session:
            return [MemoryRecord.of(row) for row in (await session.execute(query)).scalars()]

    async def approved_memories(self) -> list[MemoryRecord]:
        """Approved entries, the longest-approved first (what turns are shown, newest last)."""
        query = (
            select(MemoryRow)
            .where(MemoryRow.status == "approved")
            .order_by(MemoryRow.reviewed_at, MemoryRow.created_at, MemoryRow.id)
        )
        async with self.db.read() as session:
            return [MemoryRecord.of(row) for row in (await session.execute(query)).scalars()]

    async def get_memory(self, entry_id: str) -> MemoryRecord:
        async with self.db.read() as session:
            return MemoryRecord.of(await _memory_row(session, entry_id))

    async def review_memory(self, entry_id: str, status: str, *, text: str | None = None) -> MemoryRecord:
        """The person's decision: ``approved`` (with ``text`` when they edited it) or ``rejected``.
        The latest decision wins, whatever the entry's status was."""
        if _status(status) == "pending":
            raise Invalid("a review approves or rejects; it cannot make an entry pending")
        async with self.db.write() as session:
            row = await _memory_row(session, entry_id, for_update=True)
            row.status = status
            if text is not None:
                row.text = text
            row.reviewed_at = utcnow()
        return MemoryRecord.of(row)

    async def delete_memory(self, entry_id: str) -> MemoryRecord:
        async with self.db.write() as session:
            row = await _memory_row(session, entry_id, for_update=True)
            record = MemoryRecord.of(row)
            await session.delete(row)
        return record

    async def _add_memories(self, session: AsyncSession, session_id: str, entries: Sequence[MemoryRecord]) -> None:
        """Insert restored entries (an import) as proposals of ``session_id``, inside its transaction;
        an entry whose text the memory already holds is left out, as a proposal of it would be."""
        texts = {entry.text for entry in entries}
        held: set[str] = set()
        if texts:
            held = set((await session.execute(select(MemoryRow.text).where(MemoryRow.text.in_(texts)))).scalars())
        for entry in entries:
            if entry.text in held:
                continue
            held.add(entry.text)
            session.add(
                MemoryRow(
                    id=entry.id,
                    text=entry.text,
                    why=entry.why,
                    status=_status(entry.status),
                    session_id=session_id,
                    turn_id=entry.turn_id,
                    created_at=entry.created_at or utcnow(),
                    reviewed_at=entry.reviewed_at,
                )
            )


def _status(status: str) -> str:
    if status not in MEMORY_STATUSES:
        raise Invalid(f"memory status {status!r} is not one of {', '.join(MEMORY_STATUSES)}")
    return status


async def _memory_row(session: AsyncSession, entry_id: str, *, for_update: bool = False) -> MemoryRow:
    row = await session.get(MemoryRow, entry_id, with_for_update=for_update)
    if row is None:
        raise NotFound("memory", entry_id)
    return row
