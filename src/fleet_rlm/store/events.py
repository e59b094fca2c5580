"""A turn's append-only events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ARRAY, Float, Integer, Select, String, Text, any_, bindparam, case, cast, func, select, true
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from fleet_rlm.protocol.events import Event
from fleet_rlm.protocol.status import ACTIVE_STATUSES
from fleet_rlm.store.base import StoreBase, event_of, event_row, id_chunks
from fleet_rlm.store.errors import NotFound
from fleet_rlm.store.notify import Channel
from fleet_rlm.store.records import TurnRecord
from fleet_rlm.store.tables import EVENTS, TURNS


class EventQueries(StoreBase):
    async def append_events(self, events: Sequence[Event]) -> set[str]:
        """Store ``events`` of turns still queued or running (all or none) and tell the processes
        following their turns; returns the turns whose events were refused because the turn is not (or
        no longer) active, e.g. another process ended it ``interrupted`` when its runner's lease lapsed:
        nothing is stored after a turn's terminal event. An event already stored (the same turn and seq)
        is left as it is: a write whose answer was lost on the way (the connection dropped after the
        commit) is retried, and the retry must not fail on it."""
        if not events:
            return set()
        if self.db.is_sqlite:
            async with self.db.write_connection() as connection:
                return await self._store_events(connection, events)
        # One statement, committed by itself: the journal stores most events this way, and each round
        # trip of BEGIN, INSERT, NOTIFY, COMMIT waited for a busy event loop.
        async with self.db.one_statement_write() as connection:
            return await self._store_events(connection, events)

    async def _store_events(self, connection: AsyncConnection | AsyncSession, events: Sequence[Event]) -> set[str]:
        """In ``connection``'s transaction, store those of ``events`` whose turn is still active and (on
        PostgreSQL) notify their turns; returns the turns whose events were refused. On PostgreSQL each
        turn is read under a key-share lock, which waits for a transaction ending the turn elsewhere (it
        locks the turn ``FOR UPDATE``) and then sees it ended."""
        turn_ids = {event.turn_id for event in events}
        if not self.db.is_sqlite:
            stored = await connection.execute(_STORE_AND_NOTIFY, {**_columns(events), "channel": Channel.EVENTS.value})
            return turn_ids - set(stored.scalars())
        active: set[str] = set()
        for chunk in id_chunks(sorted(turn_ids)):
            # By id, the status compared here: SQLite would otherwise scan the status index.
            statuses = await connection.execute(select(TURNS.c.id, TURNS.c.status).where(TURNS.c.id.in_(chunk)))
            active.update(row.id for row in statuses if row.status in ACTIVE_STATUSES)
        rows = [event_row(e) for e in events if e.turn_id in active]
        if rows:
            await connection.execute(_STORE_ONCE, rows)
        return turn_ids - active

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
            turns = await _turns_by_id(connection, turn_ids, sqlite=self.db.is_sqlite)
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


async def _turns_by_id(connection: AsyncConnection, turn_ids: list[str], *, sqlite: bool) -> dict[str, TurnRecord]:
    if not sqlite:  # one statement text for any number of turns (prepared once)
        return {row.id: TurnRecord.of(row) for row in await connection.execute(_TURNS_BY_ID, {"ids": turn_ids})}
    turns: dict[str, TurnRecord] = {}
    for chunk in id_chunks(turn_ids):
        query = select(TURNS).where(TURNS.c.id.in_(chunk))
        turns.update((row.id, TurnRecord.of(row)) for row in await connection.execute(query))
    return turns


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
_TURNS_BY_ID = select(TURNS).where(TURNS.c.id == any_(cast(bindparam("ids"), ARRAY(String))))


def _store_and_notify() -> Select[Any]:
    """Insert the events (given as one array per column) of the turns still active and notify each turn
    that got some once (PostgreSQL): the INSERT in a WITH clause, so all of it is one statement. Its rows
    are the active turns among the events'."""
    rows = select(
        *func.unnest(
            cast(bindparam("turn_id"), ARRAY(String)),
            cast(bindparam("seq"), ARRAY(Integer)),
            cast(bindparam("type"), ARRAY(String)),
            cast(bindparam("ts"), ARRAY(Float)),
            cast(bindparam("span_id"), ARRAY(String)),
            cast(bindparam("parent_span_id"), ARRAY(String)),
            bindparam("data", type_=ARRAY(EVENTS.c.data.type)),
        )
        .table_valued(*_EVENT_COLUMNS)
        .render_derived()
        .c
    ).cte("new_events")
    active = (
        select(TURNS.c.id)
        .where(TURNS.c.id.in_(select(rows.c.turn_id)), TURNS.c.status.in_(ACTIVE_STATUSES))
        .with_for_update(read=True, key_share=True)
        .cte("active")
    )
    stored = (
        postgresql.insert(EVENTS)
        .from_select(list(_EVENT_COLUMNS), select(*rows.c).where(rows.c.turn_id.in_(select(active.c.id))))
        .on_conflict_do_nothing(index_elements=[EVENTS.c.turn_id, EVENTS.c.seq])
        .returning(EVENTS.c.turn_id)
        .cte("stored")
    )
    notified = case(
        (active.c.id.in_(select(stored.c.turn_id)), cast(func.pg_notify(bindparam("channel"), active.c.id), Text))
    )
    return select(active.c.id, notified)


_EVENT_COLUMNS = ("turn_id", "seq", "type", "ts", "span_id", "parent_span_id", "data")
_STORE_AND_NOTIFY = _store_and_notify()
_STORE_ONCE = sqlite.insert(EVENTS).on_conflict_do_nothing(index_elements=[EVENTS.c.turn_id, EVENTS.c.seq])


def _columns(events: Sequence[Event]) -> dict[str, list[Any]]:
    rows = [event_row(e) for e in events]
    return {column: [row[column] for row in rows] for column in _EVENT_COLUMNS}
