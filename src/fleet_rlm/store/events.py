"""A turn's append-only events."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import insert, select

from fleet_rlm.protocol.events import Event
from fleet_rlm.store.base import StoreBase, event_of, event_row
from fleet_rlm.store.notify import Channel, notify
from fleet_rlm.store.tables import EventRow


class EventQueries(StoreBase):
    async def append_events(self, events: Sequence[Event]) -> None:
        if events:
            async with self.db.write() as session:
                await session.execute(insert(EventRow), [event_row(e) for e in events])
                await notify(self.db, session, Channel.EVENTS, [e.turn_id for e in events])

    async def events_after(self, turn_id: str, after_seq: int = 0, *, limit: int = 1000) -> list[Event]:
        query = (
            select(EventRow)
            .where(EventRow.turn_id == turn_id, EventRow.seq > after_seq)
            .order_by(EventRow.seq)
            .limit(limit)
        )
        async with self.db.read() as session:
            return [event_of(row) for row in (await session.execute(query)).scalars()]
