"""A turn's append-only events."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from fleet_rlm.protocol.events import Event
from fleet_rlm.store.base import StoreBase, event_of, event_row, read_turn
from fleet_rlm.store.notify import Channel, notify
from fleet_rlm.store.records import TurnRecord
from fleet_rlm.store.tables import EVENTS


class EventQueries(StoreBase):
    async def append_events(self, events: Sequence[Event]) -> None:
        if events:
            async with self.db.write_connection() as connection:
                await connection.execute(insert(EVENTS), [event_row(e) for e in events])
                await notify(self.db, connection, Channel.EVENTS, [e.turn_id for e in events])

    async def events_after(self, turn_id: str, after_seq: int = 0, *, limit: int = 1000) -> list[Event]:
        async with self.db.read_connection() as connection:
            return await _events_after(connection, turn_id, after_seq, limit)

    async def turn_and_events(self, turn_id: str, after_seq: int, *, limit: int) -> tuple[TurnRecord, list[Event]]:
        """The turn and its events after ``after_seq`` (the first ``limit``), in one read: the turn first,
        so when it has ended, every event it stored is among those read. Raises NotFound."""
        async with self.db.read_connection() as connection:
            return await read_turn(connection, turn_id), await _events_after(connection, turn_id, after_seq, limit)


async def _events_after(connection: AsyncConnection, turn_id: str, after_seq: int, limit: int) -> list[Event]:
    query = (
        select(EVENTS).where(EVENTS.c.turn_id == turn_id, EVENTS.c.seq > after_seq).order_by(EVENTS.c.seq).limit(limit)
    )
    return [event_of(row) for row in await connection.execute(query)]
