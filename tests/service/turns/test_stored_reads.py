"""Streams of turns other processes run read the store together: one read for the readings asked at once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.service.turns.stored_reads import Read, StoredReads, StoredReadsClosed
from fleet_rlm.store import NotFound, Store

pytestmark = pytest.mark.anyio


class CountedStore:
    """Notes the readings of each read of ``store`` (and can hold the reads, or make them fail)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.reads: list[list[tuple[str, int]]] = []
        self.held = asyncio.Event()
        self.held.set()
        self.failure: Exception | None = None

    async def turns_and_events(self, readings: Sequence[tuple[str, int]], *, limit: int) -> list[Read | NotFound]:
        self.reads.append(list(readings))
        await self.held.wait()
        if self.failure is not None:
            raise self.failure
        return await self.store.turns_and_events(readings, limit=limit)


def event(turn_id: str, seq: int) -> Event:
    kind = EventType.TURN_STARTED if seq == 1 else EventType.OUTPUT
    data = {"text": f"line {seq}"} if kind is EventType.OUTPUT else {}
    return Event(type=kind, seq=seq, turn_id=turn_id, ts=1.0, span_id="span_root", parent_span_id=None, data=data)


async def running_turns(store: Store, count: int, events: int) -> list[str]:
    turn_ids = []
    for _ in range(count):
        session = await store.create_session()
        turn, _ = await store.create_turn(session.id, "go")
        await store.mark_running(turn.id, events=[event(turn.id, 1)])
        await store.append_events([event(turn.id, seq) for seq in range(2, events + 1)])
        turn_ids.append(turn.id)
    return turn_ids


async def a_read_under_way(store: Store, turn_id: str) -> tuple[CountedStore, StoredReads, asyncio.Task[Read]]:
    """Reads of ``store`` held, and a reading of ``turn_id`` whose read is under way."""
    counted = CountedStore(store)
    reads = StoredReads(counted, limit=10)
    counted.held.clear()
    reading = asyncio.create_task(reads.read(turn_id, 0))
    while not counted.reads:
        await asyncio.sleep(0.01)
    return counted, reads, reading


async def test_readings_asked_together_are_made_in_one_read_each_answered_with_its_own(store: Store) -> None:
    turn_ids = await running_turns(store, 30, events=4)
    counted = CountedStore(store)
    reads = StoredReads(counted, limit=2)
    answers = await asyncio.gather(*(reads.read(turn_id, index % 3) for index, turn_id in enumerate(turn_ids)))
    assert len(counted.reads) == 1
    for index, (turn_id, (turn, events)) in enumerate(zip(turn_ids, answers, strict=True)):
        after = index % 3
        assert turn.id == turn_id and turn.status == "running"
        assert [e.seq for e in events] == [after + 1, after + 2]  # its own place, its limit
        assert all(e.turn_id == turn_id for e in events)

    (turn, events) = await reads.read(turn_ids[0], 3)  # a lone reading is read at once
    assert len(counted.reads) == 2 and [e.seq for e in events] == [4]
    await reads.close()


async def test_readings_asked_while_a_read_runs_are_made_together_in_the_next(store: Store) -> None:
    first, *others = await running_turns(store, 5, events=2)
    counted, reads, reading = await a_read_under_way(store, first)
    later = [asyncio.create_task(reads.read(turn_id, 1)) for turn_id in others]
    await asyncio.sleep(0.05)
    counted.held.set()
    _, events = await reading
    assert [e.seq for e in events] == [1, 2]
    assert [[e.seq for e in events] for _, events in await asyncio.gather(*later)] == [[2]] * 4
    assert counted.reads == [[(first, 0)], [(turn_id, 1) for turn_id in others]]
    await reads.close()


async def test_a_missing_turn_fails_its_reader_alone_and_a_failed_read_fails_each_of_its_readers(
    store: Store,
) -> None:
    [turn_id] = await running_turns(store, 1, events=1)
    counted = CountedStore(store)
    reads = StoredReads(counted, limit=10)
    hostile = "turn_x'); DELETE FROM events; --"  # a client names the turn it streams
    found, missing, refused = await asyncio.gather(
        reads.read(turn_id, 0), reads.read("turn_missing", 0), reads.read(hostile, -1), return_exceptions=True
    )
    assert isinstance(missing, NotFound) and isinstance(refused, NotFound)
    assert not isinstance(found, BaseException) and [e.seq for e in found[1]] == [1]
    assert [e.seq for e in await store.events_after(turn_id)] == [1]

    counted.failure = ConnectionError("the database went away")
    failed = await asyncio.gather(reads.read(turn_id, 0), reads.read(turn_id, 1), return_exceptions=True)
    assert [str(answer) for answer in failed] == ["the database went away"] * 2
    counted.failure = None
    _, events = await reads.read(turn_id, 0)  # the next read is made as before
    assert [e.seq for e in events] == [1]
    await reads.close()


async def test_a_reader_that_goes_away_leaves_the_others_their_answers_and_is_not_read(store: Store) -> None:
    first, gone, staying = await running_turns(store, 3, events=1)
    counted, reads, reading = await a_read_under_way(store, first)
    leaving = asyncio.create_task(reads.read(gone, 0))  # waits for the next read
    waiting = asyncio.create_task(reads.read(staying, 0))
    await asyncio.sleep(0.05)
    leaving.cancel()
    counted.held.set()
    _, events = await asyncio.wait_for(waiting, 10)
    assert [e.seq for e in events] == [1] and leaving.cancelled()
    assert counted.reads == [[(first, 0)], [(staying, 0)]]
    await asyncio.wait_for(reading, 10)
    await reads.close()


async def test_a_seq_beyond_any_stored_one_reads_nothing_without_failing_the_others(store: Store) -> None:
    a, b = await running_turns(store, 2, events=2)
    reads = StoredReads(store, limit=10)
    (_, beyond), (_, events) = await asyncio.gather(reads.read(a, 2**40), reads.read(b, 0))
    assert beyond == [] and [e.seq for e in events] == [1, 2]
    await reads.close()


async def test_closing_stops_the_read_under_way_and_answers_every_reader_still_waiting(store: Store) -> None:
    first, later = await running_turns(store, 2, events=1)
    counted, reads, reading = await a_read_under_way(store, first)
    queued = asyncio.create_task(reads.read(later, 0))  # not taken yet
    await asyncio.sleep(0.05)
    await asyncio.wait_for(reads.close(), 10)
    for reader in (reading, queued):
        with pytest.raises(StoredReadsClosed):
            await asyncio.wait_for(reader, 10)
    with pytest.raises(StoredReadsClosed):  # a stream woken after the close reads nothing
        await reads.read(first, 0)
    assert len(counted.reads) == 1


async def test_a_read_cut_short_by_a_bug_leaves_no_reader_waiting(store: Store) -> None:
    [turn_id] = await running_turns(store, 1, events=1)
    counted, reads, reading = await a_read_under_way(store, turn_id)
    queued = asyncio.create_task(reads.read(turn_id, 1))
    await asyncio.sleep(0.05)
    task = reads._task
    assert task is not None
    task.cancel()  # as a cancellation no close asked for would
    for reader in (reading, queued):
        with pytest.raises(StoredReadsClosed):
            await asyncio.wait_for(reader, 10)
    counted.held.set()
    _, events = await asyncio.wait_for(reads.read(turn_id, 0), 10)  # the next read is made as before
    assert [e.seq for e in events] == [1]
    await reads.close()
