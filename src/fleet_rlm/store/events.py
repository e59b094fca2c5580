"""A turn's append-only events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ARRAY, Integer, Select, String, bindparam, cast, func, insert, select, true
from sqlalchemy.ext.asyncio import AsyncConnection

from fleet_rlm.protocol.events import Event
from fleet_rlm.store.base import StoreBase, event_of, event_row
from fleet_rlm.store.errors import NotFound
from fleet_rlm.store.notify import Channel, notify
from fleet_rlm.store.records import TurnRecord
from fleet_rlm.store.tables import EVENTS, TURNS


class EventQueries(StoreBase):
    async def append_events(self, events: Sequence[Event]) -> None:
        if events:
            async with self.db.write_connection() as connection:
                await connection.execute(insert(EVENTS), [event_row(e) for e in events])
                await notify(self.db, connection, Channel.EVENTS, [e.turn_id for e in events])

    async def events_after(self, turn_id: str, after_seq: int = 0, *, limit: int = 1000) -> list[Event]:
        async with self.db.read_connection() as connection:
            return await _events_after(connection, turn_id, after_seq, limit)

    async def turns_and_events(
        self, readings: Sequence[tuple[str, int]], *, limit: int
    ) -> list[tuple[TurnRecord, list[Event]] | NotFound]:
        """For each (turn id, seq) of ``readings``: the turn and its events after that seq (the first
        ``limit``), or NotFound. One read for all (the streams a notification woke together read
        together): the turns first, so for a turn that has ended every event it stored is among those
        read; then the events (on PostgreSQL one statement, each reading its own index range)."""
        turn_ids = list(dict.fromkeys(turn_id for turn_id, _ in readings))
        events: list[list[Event]] = [[] for _ in readings]
        async with self.db.read_connection() as connection:
            turns: dict[str, TurnRecord] = {}
            for start in range(0, len(turn_ids), 500):
                ids = turn_ids[start : start + 500]
                query = select(TURNS).where(TURNS.c.id.in_(ids))
                turns.update((row.id, TurnRecord.of(row)) for row in await connection.execute(query))
            wanted = [(index, turn_id, after) for index, (turn_id, after) in enumerate(readings) if turn_id in turns]
            if self.db.is_sqlite:  # in-process reads: one statement each costs no round trip
                for index, turn_id, after in wanted:
                    events[index] = await _events_after(connection, turn_id, after, limit)
            elif wanted:
                parameters = {
                    "readings": [index for index, _, _ in wanted],
                    "turn_ids": [turn_id for _, turn_id, _ in wanted],
                    "afters": [after for _, _, after in wanted],
                    "limit": limit,
                }
                for row in await connection.execute(_RANGES, parameters):
                    events[row.reading].append(event_of(row))
        return [
            (turns[turn_id], events[index]) if turn_id in turns else NotFound("turn", turn_id)
            for index, (turn_id, _) in enumerate(readings)
        ]


async def _events_after(connection: AsyncConnection, turn_id: str, after_seq: int, limit: int) -> list[Event]:
    query = (
        select(EVENTS).where(EVENTS.c.turn_id == turn_id, EVENTS.c.seq > after_seq).order_by(EVENTS.c.seq).limit(limit)
    )
    return [event_of(row) for row in await connection.execute(query)]


def _ranges() -> Select[Any]:
    """Each reading's first ``limit`` events after its seq, labelled with the reading, in seq order within
    it (PostgreSQL): the readings as arrays, each one's index range read by a lateral subquery. The
    statement is the same for any number of readings (compiled and prepared once)."""
    wanted = (
        func.unnest(
            cast(bindparam("readings"), ARRAY(Integer)),
            cast(bindparam("turn_ids"), ARRAY(String)),
            cast(bindparam("afters"), ARRAY(Integer)),
        )
        .table_valued("reading", "turn_id", "after_seq")
        .render_derived()
    )
    ranges = (
        select(EVENTS)
        .where(EVENTS.c.turn_id == wanted.c.turn_id, EVENTS.c.seq > wanted.c.after_seq)
        .order_by(EVENTS.c.seq)
        .limit(bindparam("limit"))
        .lateral()
    )
    return (
        select(wanted.c.reading, ranges)
        .select_from(wanted.join(ranges, true()))
        .order_by(wanted.c.reading, ranges.c.seq)
    )


_RANGES = _ranges()
