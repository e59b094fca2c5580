"""The event journal: every event is stored before live followers see it, in each turn's order, and a
database that will not take them never loses them (the turn's final commit gets them back)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from fleet_rlm.engine.emitter import EventEmitter
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.protocol.payloads import TurnWarning
from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.service.turns.journal import EventJournal, JournalClosed
from fleet_rlm.store import Conflict, Interrupting, Store, TurnCommit, TurnEnd, TurnRecord, TurnStart
from fleet_rlm.testing.faults import FailingCalls

pytestmark = pytest.mark.anyio


async def new_turn(store: Store) -> str:
    session = await store.create_session()
    turn, _ = await store.create_turn(session.id, "a task")
    return turn.id


def warnings_of(turn_id: str, count: int) -> list[Event]:
    events: list[Event] = []
    emitter = EventEmitter(turn_id, events.append)
    for i in range(count):
        emitter.emit(TurnWarning(message=f"note {i}"))
    return events


def seqs(events: list[Event]) -> list[int]:
    return [e.seq for e in events]


async def test_events_are_stored_before_followers_see_them_in_each_turns_order(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored: set[tuple[str, int]] = set()
    batches = 0
    append = store.append_events

    async def recording_append(events: list[Event]) -> set[str]:
        nonlocal batches
        refused = await append(events)
        batches += 1
        stored.update((e.turn_id, e.seq) for e in events)
        return refused

    monkeypatch.setattr(store, "append_events", recording_append)
    journal = EventJournal(store)
    turns = [await new_turn(store) for _ in range(3)]
    published: dict[str, list[Event]] = {turn: [] for turn in turns}
    published_before_stored: list[Event] = []

    def follower(event: Event) -> None:
        if (event.turn_id, event.seq) not in stored:
            published_before_stored.append(event)
        published[event.turn_id].append(event)

    streams = {turn: warnings_of(turn, 40) for turn in turns}
    for i in range(40):  # the turns' events interleave, as concurrent turns' do
        for turn in turns:
            journal.put(streams[turn][i], follower)
    try:
        for turn in turns:
            assert await journal.flush(turn) == []
    finally:
        await journal.close()

    assert published_before_stored == []
    for turn in turns:
        assert seqs(published[turn]) == list(range(1, 41))
        assert seqs(await store.events_after(turn)) == list(range(1, 41))
    assert batches <= 3  # group commit: one insert takes what every turn emitted meanwhile


async def test_a_transient_database_failure_is_retried(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    failing = FailingCalls(failures=2)
    monkeypatch.setattr(store, "append_events", failing.wrap(store.append_events))
    journal = EventJournal(store)
    turn = await new_turn(store)
    published: list[Event] = []
    for event in warnings_of(turn, 5):
        journal.put(event, published.append)
    try:
        assert await journal.flush(turn) == []
    finally:
        await journal.close()

    assert failing.failed == 2
    assert seqs(published) == [1, 2, 3, 4, 5]
    assert seqs(await store.events_after(turn)) == [1, 2, 3, 4, 5]


async def test_events_the_database_refuses_are_still_followed_and_go_to_their_turns_commit(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = FailingCalls(failures=None)
    monkeypatch.setattr(store, "append_events", failing.wrap(store.append_events))
    journal = EventJournal(store)
    first, second = await new_turn(store), await new_turn(store)
    published: list[Event] = []
    for event in [*warnings_of(first, 3), *warnings_of(second, 2)]:
        journal.put(event, published.append)
    try:
        unwritten_first = await journal.flush(first)
        unwritten_second = await journal.flush(second)
    finally:
        await journal.close()

    assert failing.calls > 1  # it tried again before giving up
    assert [(e.turn_id, e.seq) for e in published] == [(first, 1), (first, 2), (first, 3), (second, 1), (second, 2)]
    assert seqs(unwritten_first) == [1, 2, 3] and {e.turn_id for e in unwritten_first} == {first}
    assert seqs(unwritten_second) == [1, 2] and {e.turn_id for e in unwritten_second} == {second}
    assert await store.events_after(first) == []

    # The database is back: the turn's final commit stores what the journal could not.
    monkeypatch.undo()
    await store.finish_turn(first, status="completed", answer="done", events=unwritten_first)
    assert seqs(await store.events_after(first)) == [1, 2, 3]


async def test_a_failing_follower_does_not_hold_up_the_others(store: Store) -> None:
    journal = EventJournal(store)
    turn = await new_turn(store)
    published: list[Event] = []

    def broken(event: Event) -> None:
        raise RuntimeError("this follower is gone")

    events = warnings_of(turn, 3)
    journal.put(events[0], published.append)
    journal.put(events[1], broken)
    journal.put(events[2], published.append)
    try:
        assert await journal.flush(turn) == []
    finally:
        await journal.close()

    assert seqs(published) == [1, 3]
    assert seqs(await store.events_after(turn)) == [1, 2, 3]


def ending(turn_id: str, seq: int, answer: str) -> TurnEnd:
    terminal = Event(EventType.TURN_COMPLETED, seq, turn_id, time.time(), "span_root", None, {"answer": answer})
    return TurnEnd(turn_id, TurnStatus.COMPLETED, answer=answer, events=[terminal])


async def test_turns_ending_together_commit_together_after_their_events(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits: list[tuple[int, int]] = []
    commit_turns, append_events = store.commit_turns, store.append_events
    entered, busy = asyncio.Event(), asyncio.Event()

    async def counting(**parts: Any) -> TurnCommit:
        commits.append((len(parts["events"]), len(parts["ends"])))
        return await commit_turns(**parts)

    async def held_once(events: list[Event]) -> set[str]:
        entered.set()
        await busy.wait()  # the journal is busy with an earlier batch while the turns end
        return await append_events(events)

    monkeypatch.setattr(store, "commit_turns", counting)
    monkeypatch.setattr(store, "append_events", held_once)
    journal = EventJournal(store)
    earlier, *turns = [await new_turn(store) for _ in range(5)]
    published: list[Event] = []
    published_when_ended: list[int] = []

    async def end(turn: str, answer: str) -> TurnRecord:
        record = await journal.finish(ending(turn, 4, answer))
        published_when_ended.append(len(published))
        return record

    journal.put(warnings_of(earlier, 1)[0], published.append)
    await asyncio.wait_for(entered.wait(), 5)
    for turn in turns:
        for event in warnings_of(turn, 3):
            journal.put(event, published.append)
    ends = [asyncio.ensure_future(end(t, f"answer {i}")) for i, t in enumerate(turns)]
    await asyncio.sleep(0.05)  # 12 events and 4 ends wait behind the held batch
    busy.set()
    try:
        ended = await asyncio.gather(*ends)
    finally:
        await journal.close()

    assert commits == [(12, 4)]  # one transaction: every event, then every end
    assert [(t.status, t.answer) for t in ended] == [("completed", f"answer {i}") for i in range(4)]
    assert published_when_ended == [13] * 4  # every event was followed before any end returned
    for turn in turns:
        assert seqs(await store.events_after(turn)) == [1, 2, 3, 4]
        assert (await store.get_turn(turn)).status == "completed"


async def test_closing_the_journal_tells_whoever_waits_and_never_hangs(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    never = asyncio.Event()

    async def stuck(**parts: Any) -> TurnCommit:
        await never.wait()
        raise AssertionError("unreachable")

    monkeypatch.setattr(store, "commit_turns", stuck)
    journal = EventJournal(store)
    first, second = await new_turn(store), await new_turn(store)
    in_flight = asyncio.ensure_future(journal.start(TurnStart(first)))
    await asyncio.sleep(0.05)  # its group commit is running
    queued = asyncio.ensure_future(journal.finish(ending(second, 1, "late")))
    flushing = asyncio.ensure_future(journal.flush(second))
    await asyncio.sleep(0.05)

    await asyncio.wait_for(journal.close(), 5)

    with pytest.raises(JournalClosed):
        await asyncio.wait_for(in_flight, 5)
    with pytest.raises(JournalClosed):
        await asyncio.wait_for(queued, 5)
    assert await asyncio.wait_for(flushing, 5) == []
    with pytest.raises(JournalClosed):  # after close, at once
        await asyncio.wait_for(journal.finish(ending(second, 1, "later")), 5)


async def test_a_batch_that_trips_on_a_bug_fails_its_waiters_and_the_journal_goes_on(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit_turns = store.commit_turns
    calls = 0

    async def broken_once(**parts: Any) -> TurnCommit:
        nonlocal calls
        calls += 1
        commit = await commit_turns(**parts)
        return TurnCommit(started=commit.started, ended=[]) if calls == 1 else commit  # a result short of one

    monkeypatch.setattr(store, "commit_turns", broken_once)
    journal = EventJournal(store)
    turn, later = await new_turn(store), await new_turn(store)
    try:
        with pytest.raises(ValueError):
            await journal.finish(ending(turn, 1, "tripped"))
        published: list[Event] = []
        journal.put(warnings_of(later, 1)[0], published.append)
        assert (await journal.finish(ending(later, 2, "after"))).answer == "after"
    finally:
        await journal.close()
    assert seqs(published) == [1]
    assert seqs(await store.events_after(later)) == [1, 2]


async def test_a_turn_that_already_ended_is_refused_without_holding_back_the_others(store: Store) -> None:
    journal = EventJournal(store)
    gone, live = await new_turn(store), await new_turn(store)
    await store.finish_turn(gone, status=TurnStatus.INTERRUPTED, error="its process died")
    try:
        refused, ended = await asyncio.gather(
            journal.finish(ending(gone, 1, "late")), journal.finish(ending(live, 1, "in time")), return_exceptions=True
        )
    finally:
        await journal.close()

    assert isinstance(refused, Conflict) and refused.code == "turn_not_active"
    assert (await store.get_turn(gone)).status == "interrupted"
    assert isinstance(ended, TurnRecord) and (ended.status, ended.answer) == ("completed", "in time")
    assert seqs(await store.events_after(gone)) == []


async def test_an_end_the_database_refuses_is_raised_and_the_events_with_it_are_stored_alone(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = FailingCalls(failures=1)
    monkeypatch.setattr(store, "commit_turns", failing.wrap(store.commit_turns))
    journal = EventJournal(store)
    turn = await new_turn(store)
    published: list[Event] = []
    for event in warnings_of(turn, 2):
        journal.put(event, published.append)
    try:
        with pytest.raises(OperationalError):
            await journal.finish(ending(turn, 3, "lost"))
        assert await journal.flush(turn) == []  # its events were stored without the end
    finally:
        await journal.close()

    assert seqs(published) == [1, 2]
    assert seqs(await store.events_after(turn)) == [1, 2]
    assert (await store.get_turn(turn)).status == "queued"  # the caller retries its end alone


async def test_turns_starting_together_are_marked_running_in_one_transaction(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits: list[int] = []
    commit_turns = store.commit_turns

    async def counting(**parts: Any) -> TurnCommit:
        commits.append(len(parts["starts"]))
        return await commit_turns(**parts)

    await store.add_program("v1", "{}", "0" * 64, {})
    await store.approve_program("v1", incumbent=None)
    turns = [await new_turn(store) for _ in range(3)]
    cancelled = await new_turn(store)
    await store.finish_turn(cancelled, status=TurnStatus.CANCELLED)
    monkeypatch.setattr(store, "commit_turns", counting)
    journal = EventJournal(store)
    try:
        started = await asyncio.gather(
            *(journal.start(TurnStart(t)) for t in turns), journal.start(TurnStart(cancelled))
        )
    finally:
        await journal.close()

    assert commits == [4]
    assert [s is not None for s in started] == [True, True, True, False]  # one no longer queued is not started
    assert [s.program.version for s in started if s is not None and s.program is not None] == ["v1"] * 3
    for turn in turns:
        record = await store.get_turn(turn)
        assert (record.status, record.program_version) == ("running", "v1") and record.started_at is not None
    assert (await store.get_turn(cancelled)).status == "cancelled"


async def test_events_of_a_turn_that_ended_elsewhere_are_neither_stored_nor_published_and_it_is_told(
    store: Store,
) -> None:
    """Another process ended the turn (its lease here lapsed): the journal stores and publishes nothing
    more of it, tells its owner which turn it was, and goes on with the other turns' events, alone or in
    a group commit with a turn's end."""
    ended, running, finishing = [await new_turn(store) for _ in range(3)]
    for turn in (ended, running, finishing):
        await store.mark_running(turn)
    await store.interrupt_turns(Interrupting(turn_ids={ended}), "its lease lapsed")
    told: list[str] = []
    journal = EventJournal(store, told.append)
    published: list[Event] = []
    try:
        for turn in (ended, running):
            for event in warnings_of(turn, 3):
                journal.put(event, published.append)
        assert await journal.flush(running) == []
        for event in warnings_of(ended, 4)[3:]:
            journal.put(event, published.append)
        end = TurnEnd(finishing, TurnStatus.CANCELLED, events=[replace(warnings_of(finishing, 1)[0], seq=1)])
        assert (await journal.finish(end)).status == "cancelled"
    finally:
        await journal.close()

    assert told == [ended, ended], "told at each refused write"
    assert {event.turn_id for event in published} == {running}
    assert [e.type for e in await store.events_after(ended)] == [EventType.TURN_INTERRUPTED]
    assert seqs(await store.events_after(running)) == [1, 2, 3]
