from __future__ import annotations

import asyncio
import datetime as dt
import re
from typing import Any

import pytest
import sqlalchemy.event

from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.store import (
    Conflict,
    FileChanges,
    FileRecord,
    Interrupting,
    Invalid,
    NotFound,
    Store,
    TurnEnd,
    TurnStart,
)
from fleet_rlm.store.tables import EventRow, TurnRow

pytestmark = pytest.mark.anyio


def event(turn_id: str, seq: int, type: EventType = EventType.OUTPUT, **data: object) -> Event:
    return Event(
        type=type, seq=seq, turn_id=turn_id, ts=1000.0 + seq, span_id="span_root", parent_span_id=None, data=data
    )


def artifact(path: str, sha: str = "a" * 64) -> FileRecord:
    return FileRecord(path=path, size=3, sha256=sha, media_type="text/csv", origin="artifact")


async def test_session_is_found_by_id_or_name_and_names_are_unique(store: Store) -> None:
    created = await store.create_session(name="sales-q3", title="Q3", settings={"max_iterations": 5})
    assert (await store.get_session(created.id)).name == "sales-q3"
    assert (await store.get_session("sales-q3")).id == created.id
    assert created.created_at.tzinfo is not None
    with pytest.raises(Conflict) as taken:
        await store.create_session(name="sales-q3")
    assert taken.value.code == "session_name_taken"
    with pytest.raises(NotFound) as missing:
        await store.get_session("nope")
    assert missing.value.code == "session_not_found"


@pytest.mark.parametrize("name", ["", "../x", "a b", "ses_looks_like_an_id", "x" * 65])
async def test_bad_session_name_is_refused(store: Store, name: str) -> None:
    with pytest.raises(Invalid, match="session name"):
        await store.create_session(name=name)


async def test_update_renames_and_lists_most_recent_first(store: Store) -> None:
    first = await store.create_session(name="one")
    second = await store.create_session(name="two")
    await store.update_session(first.id, title="renamed", name="uno")
    listed = await store.list_sessions()
    assert [s.id for s in listed] == [first.id, second.id]
    assert listed[0].title == "renamed" and listed[0].name == "uno"
    with pytest.raises(Conflict):
        await store.update_session("uno", name="two")
    with pytest.raises(Invalid, match="'id' cannot be changed"):
        await store.update_session("uno", id="x")


async def test_turn_positions_grow_and_only_one_turn_is_active(store: Store) -> None:
    session = await store.create_session()
    first, created = await store.create_turn(session.id, "hello")
    assert created and first.status == "queued" and first.position == 1
    with pytest.raises(Conflict) as busy:
        await store.create_turn(session.id, "again")
    assert busy.value.code == "turn_in_progress"
    assert await store.mark_running(first.id)
    await store.finish_turn(first.id, status="completed", answer="hi", events=[event(first.id, 1)])
    second, _ = await store.create_turn(session.id, "again")
    assert second.position == 2
    assert [t.message for t in await store.history(session.id)] == ["hello"]


async def test_a_turns_start_stores_its_turn_started_event_only_if_the_turn_starts(store: Store) -> None:
    sessions = [await store.create_session() for _ in range(3)]
    turn, _ = await store.create_turn(sessions[0].id, "go")
    gone, _ = await store.create_turn(sessions[1].id, "cancelled while queued")
    await store.finish_turn(gone.id, status="cancelled", events=[event(gone.id, 1, EventType.TURN_CANCELLED)])
    commit = await store.commit_turns(
        starts=[
            TurnStart(turn.id, events=[event(turn.id, 1, EventType.TURN_STARTED)]),
            TurnStart(gone.id, events=[event(gone.id, 2, EventType.TURN_STARTED)]),
        ]
    )
    assert commit.started == {turn.id}
    assert [(e.seq, e.type) for e in await store.events_after(turn.id)] == [(1, EventType.TURN_STARTED)]
    assert [e.type for e in await store.events_after(gone.id)] == [EventType.TURN_CANCELLED]
    started = await store.get_turn(turn.id)
    assert started.status == "running" and started.program_version == "builtin" and commit.program is None

    alone, _ = await store.create_turn(sessions[2].id, "started alone")
    assert await store.mark_running(alone.id, events=[event(alone.id, 1, EventType.TURN_STARTED)])
    assert not await store.mark_running(alone.id, events=[event(alone.id, 2, EventType.TURN_STARTED)])
    assert [e.seq for e in await store.events_after(alone.id)] == [1]
    assert (await store.get_turn(alone.id)).program_version == "builtin"


async def test_a_turn_is_marked_running_with_the_program_serving_in_that_transaction(store: Store) -> None:
    first, second, third = [await store.create_session() for _ in range(3)]
    await store.add_program("v1", '{"extract": "be brief"}', "0" * 64, {})
    await store.approve_program("v1", incumbent=None)
    grouped, _ = await store.create_turn(first.id, "in a group commit")
    commit = await store.commit_turns(starts=[TurnStart(grouped.id)])
    assert commit.program is not None and (commit.program.version, commit.program.content) == (
        "v1",
        '{"extract": "be brief"}',
    )
    assert (await store.get_turn(grouped.id)).program_version == "v1"

    await store.add_program("v2", "{}", "1" * 64, {})
    await store.approve_program("v2", incumbent="v1")
    alone, _ = await store.create_turn(second.id, "alone")
    assert await store.mark_running(alone.id)
    assert (await store.get_turn(alone.id)).program_version == "v2"

    await store.retire_active_program()
    await store.retire_active_program()
    rolled_back, _ = await store.create_turn(third.id, "after both were rolled back")
    commit = await store.commit_turns(starts=[TurnStart(rolled_back.id)])
    assert commit.program is None and (await store.get_turn(rolled_back.id)).program_version == "builtin"


async def test_concurrent_turn_requests_create_exactly_one(store: Store) -> None:
    session = await store.create_session()
    results = await asyncio.gather(*(store.create_turn(session.id, f"m{i}") for i in range(6)), return_exceptions=True)
    created = [r for r in results if isinstance(r, tuple)]
    refused = [r for r in results if isinstance(r, Conflict)]
    assert len(created) == 1 and len(refused) == 5


async def test_idempotency_key_returns_the_first_turn(store: Store) -> None:
    session = await store.create_session()
    turn, created = await store.create_turn(session.id, "hello", idempotency_key="k1")
    again, created_again = await store.create_turn(session.id, "hello", idempotency_key="k1")
    assert created and not created_again and again.id == turn.id
    with pytest.raises(Invalid) as reused:
        await store.create_turn(session.id, "something else", idempotency_key="k1")
    assert reused.value.code == "idempotency_key_reused"


async def test_finish_commits_status_events_and_files_together(store: Store) -> None:
    session = await store.create_session()
    turn, _ = await store.create_turn(session.id, "make a csv")
    await store.mark_running(turn.id)
    await store.append_events([event(turn.id, 1, EventType.TURN_STARTED), event(turn.id, 2)])
    done = await store.finish_turn(
        turn.id,
        status="completed",
        answer="done",
        usage={"model_calls": 2},
        artifacts=[{"path": "artifacts/out.csv", "size": 3, "sha256": "a" * 64}],
        events=[event(turn.id, 3, EventType.TURN_COMPLETED, answer="done")],
        files=FileChanges(upserts=[artifact("artifacts/out.csv")]),
    )
    assert done.status == "completed" and done.finished_at is not None
    stored = await store.get_turn(turn.id)
    assert stored.answer == "done" and stored.usage == {"model_calls": 2}
    assert [e.seq for e in await store.events_after(turn.id)] == [1, 2, 3]
    assert [e.seq for e in await store.events_after(turn.id, 1, limit=1)] == [2]
    files = await store.list_files(session.id)
    assert [(f.path, f.origin, f.turn_id) for f in files] == [("artifacts/out.csv", "artifact", turn.id)]


async def test_a_turn_and_its_events_after_a_seq_are_read_together(store: Store) -> None:
    session = await store.create_session()
    turn, _ = await store.create_turn(session.id, "go")
    [(queued, nothing)] = await store.turns_and_events([(turn.id, 0)], limit=10)
    assert (queued.status, nothing) == ("queued", [])
    await store.mark_running(turn.id, events=[event(turn.id, 1, EventType.TURN_STARTED)])
    await store.append_events([event(turn.id, 2), event(turn.id, 3)])
    [(running, some)] = await store.turns_and_events([(turn.id, 1)], limit=1)
    assert running.status == "running" and [e.seq for e in some] == [2]
    await store.finish_turn(turn.id, status="completed", events=[event(turn.id, 4, EventType.TURN_COMPLETED)])
    [(ended, rest)] = await store.turns_and_events([(turn.id, 2)], limit=10)
    assert ended.status == "completed" and [(e.seq, e.type) for e in rest] == [(3, "output"), (4, "turn.completed")]
    [missing] = await store.turns_and_events([("turn_missing", 0)], limit=10)
    assert isinstance(missing, NotFound)


async def test_many_readers_positions_are_read_together_each_from_its_own_seq(store: Store) -> None:
    """The streams a notification woke read together: each (turn, seq) gets its own events after its
    seq, at most ``limit``, in order; two readers of one turn at different places each get theirs; a
    missing turn is NotFound without failing the others."""
    session = await store.create_session()
    turns = []
    for index in range(40):
        other = await store.create_session()
        turn, _ = await store.create_turn(other.id, f"turn {index}")
        await store.mark_running(turn.id, events=[event(turn.id, 1, EventType.TURN_STARTED)])
        await store.append_events([event(turn.id, seq) for seq in range(2, 2 + index % 7)])
        turns.append(turn)
    queued, _ = await store.create_turn(session.id, "still queued")
    readings = [(turn.id, index % 3) for index, turn in enumerate(turns)]
    readings += [(turns[6].id, 0), ("turn_missing", 0), (queued.id, 0), (turns[6].id, 4)]
    read = await store.turns_and_events(readings, limit=4)
    assert len(read) == len(readings)
    found: dict[tuple[str, int], tuple[str, list[int]]] = {}
    for (turn_id, after), answer in zip(readings, read, strict=True):
        if turn_id == "turn_missing":
            assert isinstance(answer, NotFound)
            continue
        assert not isinstance(answer, NotFound)
        record, events = answer
        assert record.id == turn_id and events == await store.events_after(turn_id, after, limit=4)
        found[turn_id, after] = (record.status, [e.seq for e in events])
    assert found[turns[6].id, 0] == ("running", [1, 2, 3, 4])
    assert found[turns[6].id, 4] == ("running", [5, 6, 7])
    assert found[queued.id, 0] == ("queued", [])


async def test_many_readings_read_the_turns_before_their_events(store: Store) -> None:
    """A turn read as ended must come with every event it stored: the turns are read first."""
    turn_ids = []
    for _ in range(3):
        session = await store.create_session()
        turn, _ = await store.create_turn(session.id, "go")
        await store.mark_running(turn.id, events=[event(turn.id, 1, EventType.TURN_STARTED)])
        turn_ids.append(turn.id)
    statements: list[str] = []

    def note(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    engine = (store.db.read_engine if store.db.is_sqlite else store.db.write_engine).sync_engine
    sqlalchemy.event.listen(engine, "before_cursor_execute", note)
    try:
        await store.turns_and_events([(turn_id, 0) for turn_id in turn_ids], limit=10)
    finally:
        sqlalchemy.event.remove(engine, "before_cursor_execute", note)
    tables = ["turns" if re.search(r"\bFROM turns\b", s) else "events" for s in statements]
    assert "turns" in tables and "events" in tables
    assert tables == sorted(tables, key=lambda table: table != "turns")  # every turn read before any event


async def test_a_failing_finish_commits_nothing(store: Store) -> None:
    session = await store.create_session()
    turn, _ = await store.create_turn(session.id, "x")
    await store.mark_running(turn.id)
    bad = FileRecord(path="artifacts/a", size=1, sha256="b" * 64, media_type="x", origin="nonsense")
    with pytest.raises(Invalid):
        await store.finish_turn(
            turn.id,
            status="completed",
            answer="half",
            events=[event(turn.id, 1, EventType.TURN_COMPLETED)],
            files=FileChanges(upserts=[artifact("artifacts/ok.csv"), bad]),
        )
    stored = await store.get_turn(turn.id)
    assert stored.status == "running" and stored.answer is None
    assert await store.events_after(turn.id) == []
    assert await store.list_files(session.id) == []


async def test_interrupted_turn_gets_a_terminal_event_and_cannot_be_finished_later(store: Store) -> None:
    session = await store.create_session()
    turn, _ = await store.create_turn(session.id, "x", runner="host:1:abc")
    await store.mark_running(turn.id)
    await store.append_events([event(turn.id, 1, EventType.TURN_STARTED), event(turn.id, 2)])
    interrupted = await store.interrupt_turns(Interrupting(turn_ids={turn.id}), "the server died")
    assert [t.id for t in interrupted] == [turn.id]
    events = await store.events_after(turn.id)
    assert [(e.seq, e.type) for e in events][-1] == (3, EventType.TURN_INTERRUPTED)
    assert events[-1].data == {"reason": "the server died"} and events[-1].span_id == "span_root"
    assert (await store.get_turn(turn.id)).status == "interrupted"
    with pytest.raises(Conflict) as late:
        await store.finish_turn(turn.id, status="completed", answer="too late")
    assert late.value.code == "turn_not_active"
    # The session is usable again.
    assert (await store.create_turn(session.id, "next"))[1]


async def test_events_of_a_turn_that_ended_are_refused_nothing_is_stored_after_its_terminal_event(
    store: Store,
) -> None:
    """A process that kept running a turn another process ended (its lease lapsed) cannot store more
    of it, by itself or in a group commit with other turns' events; it is told which turns were refused."""
    session, other = await store.create_session(), await store.create_session()
    ended, _ = await store.create_turn(session.id, "x")
    running, _ = await store.create_turn(other.id, "y")
    for turn in (ended, running):
        await store.mark_running(turn.id, events=[event(turn.id, 1, EventType.TURN_STARTED)])
    await store.interrupt_turns(Interrupting(turn_ids={ended.id}), "its lease lapsed")

    assert await store.append_events([event(ended.id, 3), event(running.id, 2)]) == {ended.id}
    commit = await store.commit_turns(events=[event(ended.id, 4), event(running.id, 3)])
    assert commit.refused == {ended.id}
    finished = await store.commit_turns(
        events=[event(running.id, 4)],
        ends=[TurnEnd(running.id, TurnStatus.COMPLETED, events=[event(running.id, 5, EventType.TURN_COMPLETED)])],
    )
    assert finished.refused == set(), "a turn's events put with its end are stored"

    assert [(e.seq, e.type) for e in await store.events_after(ended.id)] == [
        (1, EventType.TURN_STARTED),
        (2, EventType.TURN_INTERRUPTED),
    ]
    assert [e.seq for e in await store.events_after(running.id)] == [1, 2, 3, 4, 5]


async def test_deleting_a_session_removes_its_turns_and_files_but_not_while_busy(store: Store) -> None:
    session = await store.create_session(name="gone")
    turn, _ = await store.create_turn(session.id, "x")
    await store.put_file(session.id, FileRecord("files/a.csv", 3, "c" * 64, "text/csv", "upload"))
    with pytest.raises(Conflict) as busy:
        await store.delete_session("gone")
    assert busy.value.code == "session_busy"
    await store.finish_turn(turn.id, status="cancelled", events=[event(turn.id, 1, EventType.TURN_CANCELLED)])
    await store.delete_session("gone")
    with pytest.raises(NotFound):
        await store.get_turn(turn.id)
    assert await store.list_files(session.id) == []
    assert await store.events_after(turn.id) == []


async def test_files_are_replaced_in_place_and_deleted(store: Store) -> None:
    session = await store.create_session()
    await store.put_file(session.id, FileRecord("files/a.csv", 3, "c" * 64, "text/csv", "upload"))
    before = await store.get_file(session.id, "files/a.csv")
    replaced = await store.put_file(session.id, FileRecord("files/a.csv", 5, "d" * 64, "text/csv", "upload"))
    assert replaced.sha256 == "d" * 64 and replaced.created_at == before.created_at
    assert await store.referenced_blobs(session.id) == {"d" * 64}
    await store.delete_file(session.id, "files/a.csv")
    with pytest.raises(NotFound) as missing:
        await store.get_file(session.id, "files/a.csv")
    assert missing.value.code == "file_not_found"


async def test_timestamps_are_utc_aware(store: Store) -> None:
    session = await store.create_session()
    assert session.updated_at.tzinfo is not None
    fetched = await store.get_session(session.id)
    assert fetched.created_at.utcoffset() == dt.timedelta(0)


async def test_ending_a_turn_elsewhere_and_storing_its_events_wait_for_each_other(store: Store) -> None:
    """PostgreSQL: an interrupt waits for a transaction storing the turn's events (its terminal event
    goes after them), and a write of events waits for a transaction ending the turn (then refuses them)."""
    if store.db.is_sqlite:
        pytest.skip("SQLite has one writer at a time: its transactions never interleave")
    session = await store.create_session()
    first, _ = await store.create_turn(session.id, "x")
    await store.mark_running(first.id, events=[event(first.id, 1, EventType.TURN_STARTED)])
    async with store.db.write() as storing:
        storing.add(EventRow(turn_id=first.id, seq=2, type="output", ts=0.0, span_id="span_root", data={}))
        await storing.flush()
        interrupting = asyncio.create_task(store.interrupt_turns(Interrupting(turn_ids={first.id}), "lapsed"))
        await asyncio.sleep(0.5)
        assert not interrupting.done(), "the interrupt did not wait for the events being stored"
    await asyncio.wait_for(interrupting, 10)
    assert [(e.seq, e.type) for e in await store.events_after(first.id)][1:] == [
        (2, EventType.OUTPUT),
        (3, EventType.TURN_INTERRUPTED),
    ]

    second, _ = await store.create_turn(session.id, "y")
    await store.mark_running(second.id, events=[event(second.id, 1, EventType.TURN_STARTED)])
    async with store.db.write() as ending:
        row = await ending.get(TurnRow, second.id, with_for_update=True)
        assert row is not None
        row.status = TurnStatus.INTERRUPTED
        await ending.flush()
        writing = asyncio.create_task(store.append_events([event(second.id, 2)]))
        await asyncio.sleep(0.5)
        assert not writing.done(), "the write did not wait for the turn being ended"
    assert await asyncio.wait_for(writing, 10) == {second.id}
    assert [e.seq for e in await store.events_after(second.id)] == [1]
