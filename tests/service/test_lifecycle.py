from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from fleet_rlm.engine.program import FleetTask, ProgramSpec
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.sandbox import registry
from fleet_rlm.service.kernels.pool import LIFECYCLE_THREADS
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns import service as turns
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.service.turns.stored_reads import Read
from fleet_rlm.store import Conflict, Database, NotFound, Store, TurnCommit, TurnRecord
from fleet_rlm.store.runners import this_host
from fleet_rlm.testing.backends import HeldStartBackend
from fleet_rlm.testing.settings import SettingsFactory

pytestmark = pytest.mark.anyio

SLOW = "print('started', flush=True)\nimport time\ntime.sleep(30)\nSUBMIT(answer='too late')"


async def wait_for_output(service: FleetService, turn_id: str, text: str) -> list[Event]:
    seen: list[Event] = []
    async for event in await service.turns.events(turn_id):
        seen.append(event)
        if event.type is EventType.OUTPUT and text in str(event.data.get("text")):
            return seen
        assert not event.terminal, f"turn ended before printing {text!r}: {event.data}"
    raise AssertionError("stream ended")


async def one_running_one_queued(
    service: FleetService, model_server: ScriptedModelServer
) -> tuple[TurnRecord, TurnRecord]:
    """In a service with room for one turn: a slow turn running (session a), a quick one queued behind it
    (session b, answering 'my turn' once it runs)."""
    for name in ("a", "b"):
        await service.sessions.create(name=name)
    model_server.script("root", rlm_step("Slow.", SLOW))
    running, _ = await service.turns.submit("a", TurnSubmission(message="slow"))
    await wait_for_output(service, running.id, "started")
    model_server.script("root", rlm_step("Quick.", "SUBMIT(answer='my turn')"))
    waiting, _ = await service.turns.submit("b", TurnSubmission(message="waits"))
    return running, waiting


async def test_cancel_stops_a_running_turn_and_commits_no_files(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    await service.sessions.create(name="s")
    model_server.script("root", rlm_step("Slow.", "open('artifacts/partial.txt','w').write('x')\n" + SLOW))
    turn, _ = await service.turns.submit("s", TurnSubmission(message="slow"))
    await wait_for_output(service, turn.id, "started")
    with pytest.raises(Conflict) as busy:
        await service.turns.submit("s", TurnSubmission(message="another"))
    assert busy.value.code == "turn_in_progress"
    await service.turns.cancel(turn.id)
    done = await service.turns.wait(turn.id)
    assert done.status == "cancelled"
    events = await service.parts.store.events_after(turn.id)
    assert events[-1].type is EventType.TURN_CANCELLED
    assert await service.files.in_session("s") == []
    with pytest.raises(Conflict) as ended:
        await service.turns.cancel(turn.id)
    assert ended.value.code == "turn_not_active"


async def test_followers_replay_from_any_point_live_and_after_the_end(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    await service.sessions.create(name="s")
    model_server.script("root", rlm_step("Go.", "print('a')"), rlm_step("Done.", "SUBMIT(answer='ok')"))
    turn, _ = await service.turns.submit("s", TurnSubmission(message="x"))
    live = [e async for e in await service.turns.events(turn.id)]
    await service.turns.wait(turn.id)
    seqs = [e.seq for e in live]
    assert seqs == list(range(1, len(seqs) + 1))
    replayed = [e async for e in await service.turns.events(turn.id, after_seq=3)]
    assert [e.seq for e in replayed] == seqs[3:]
    assert [e.to_dict() for e in replayed] == [e.to_dict() for e in live[3:]]


async def test_turn_sandbox_is_labelled_then_torn_down_and_symlinks_out_are_not_kept(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    session = await service.sessions.create(name="s")
    code = (
        "import os\nos.symlink('/etc/passwd', 'artifacts/passwd')\nopen('artifacts/ok.txt','w').write('ok')\n"
        "print('started', flush=True)\nimport time\ntime.sleep(0.5)\nSUBMIT(answer='done')"
    )
    model_server.script("root", rlm_step("Go.", code))
    turn, _ = await service.turns.submit("s", TurnSubmission(message="x"))
    await wait_for_output(service, turn.id, "started")
    sandboxes = service.settings.data_dir / "sandboxes"
    labels = [json.loads(p.read_text()) for p in sandboxes.glob("*/label.json")]
    mine = [label for label in labels if label.get("turn") == turn.id]
    assert len(mine) == 1 and mine[0]["session"] == session.id and mine[0]["runner"] == service.parts.runner
    done = await service.turns.wait(turn.id)
    assert done.status == "completed", done.error
    # The turn's sandbox lives on as the session's kernel; a restart tears it down.
    assert (sandboxes / mine[0]["sandbox"]).exists()
    await service.kernels.restart("s")
    assert not (sandboxes / mine[0]["sandbox"]).exists()
    assert [r.path for r, _ in await service.files.in_session("s")] == ["artifacts/ok.txt"]


async def test_stopping_the_server_interrupts_running_turns(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    settings = make_settings()
    service = FleetService(settings, database=Database(str(settings.database_url)))
    await service.start()
    await service.sessions.create(name="s")
    model_server.script("root", rlm_step("Slow.", SLOW))
    turn, _ = await service.turns.submit("s", TurnSubmission(message="slow"))
    await wait_for_output(service, turn.id, "started")
    await service.stop()

    store = Store(Database(str(settings.database_url)))
    stored = await store.get_turn(turn.id)
    events = await store.events_after(turn.id)
    await store.db.dispose()
    assert stored.status == "interrupted"
    assert [e.type for e in events if e.terminal] == [EventType.TURN_INTERRUPTED]
    assert "shut down" in events[-1].data["reason"]


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


async def test_start_up_interrupts_turns_of_dead_processes_and_reaps_their_sandboxes(
    make_settings: SettingsFactory,
) -> None:
    settings = make_settings(sandbox_pool_size=0)
    database = Database(str(settings.database_url))
    await database.migrate()
    store = Store(database)
    session = await store.create_session(name="s")
    dead = f"{this_host()}:{dead_pid()}:gone"
    orphan, _ = await store.create_turn(session.id, "was running", runner=dead)
    await store.mark_running(orphan.id)
    started = Event(EventType.TURN_STARTED, 1, orphan.id, 1.0, "span_x", None, {})
    await store.append_events([started])
    elsewhere = await store.create_session(name="other-host")
    remote, _ = await store.create_turn(elsewhere.id, "on another machine", runner="elsewhere:1:abc")
    await database.dispose()
    leftover = settings.data_dir / "sandboxes" / "sbx_dead"
    leftover.mkdir(parents=True)
    (leftover / "label.json").write_text(json.dumps({"runner": dead, "turn": orphan.id}))

    service = FleetService(settings, database=Database(str(settings.database_url)))
    reconciled = await service.start()
    try:
        assert [t.id for t in reconciled.interrupted] == [orphan.id]
        assert [r["sandbox"] for r in reconciled.reaped] == ["sbx_dead"]
        assert not leftover.exists()
        events = await service.parts.store.events_after(orphan.id)
        assert [(e.seq, e.type) for e in events] == [(1, EventType.TURN_STARTED), (2, EventType.TURN_INTERRUPTED)]
        assert events[-1].span_id == "span_x"
        assert (await service.parts.store.get_turn(remote.id)).status == "queued"
        replay = [e async for e in await service.turns.events(orphan.id)]
        assert replay[-1].type is EventType.TURN_INTERRUPTED
    finally:
        await service.stop()


async def a_turn_running_and_one_waiting(
    service: FleetService, model_server: ScriptedModelServer
) -> tuple[TurnRecord, TurnRecord]:
    """In a service that runs one turn at a time: a slow turn running (in session ``running``) and one
    queued behind it (in session ``waiting``)."""
    for name in ("running", "waiting"):
        await service.sessions.create(name=name)
    model_server.script("root", rlm_step("Slow.", SLOW))
    running, _ = await service.turns.submit("running", TurnSubmission(message="slow"))
    await wait_for_output(service, running.id, "started")
    waiting, _ = await service.turns.submit("waiting", TurnSubmission(message="waits"))
    return running, waiting


async def give_up(service: FleetService, turn_id: str, how: str) -> None:
    """Cancel the turn, or leave it as an MCP or OpenAI-compatible caller that went away does."""
    if how == "cancel":
        await service.turns.cancel(turn_id)
    else:
        service.turns.abandon(turn_id)


@pytest.mark.parametrize("how", ["cancel", "abandon"])
async def test_turns_beyond_the_running_limit_wait_queued_and_can_be_cancelled_there(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, how: str
) -> None:
    """A turn still queued that its caller gave up on must not run later for nobody."""
    settings = make_settings(max_running_turns=1)
    service = FleetService(settings, database=Database(str(settings.database_url)))
    await service.start()
    try:
        running, waiting = await a_turn_running_and_one_waiting(service, model_server)
        await service.sessions.create(name="doomed")
        doomed, _ = await service.turns.submit("doomed", TurnSubmission(message="given up"))
        assert (await service.parts.store.get_turn(waiting.id)).status == "queued"

        await give_up(service, doomed.id, how)
        assert (await service.turns.wait(doomed.id)).status == "cancelled"
        assert (await service.parts.store.get_turn(running.id)).status == "running"

        model_server.script("root", rlm_step("Quick.", "SUBMIT(answer='my turn')"))
        await give_up(service, running.id, how)
        assert (await service.turns.wait(running.id)).status == "cancelled"
        assert (await service.turns.wait(waiting.id)).answer == "my turn"
    finally:
        await service.stop()


async def test_a_queued_turn_whose_caller_left_just_before_the_process_stops_ends_cancelled(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    """As when an MCP host closes ``fleet mcp``: its calls are given up, then the process stops."""
    settings = make_settings(max_running_turns=1)
    service = FleetService(settings, database=Database(str(settings.database_url)))
    await service.start()
    running, waiting = await a_turn_running_and_one_waiting(service, model_server)

    service.turns.abandon(waiting.id)
    service.turns.abandon(running.id)
    await service.stop()
    store = Store(Database(str(settings.database_url)))
    try:
        assert [(await store.get_turn(t.id)).status for t in (running, waiting)] == ["cancelled", "cancelled"]
    finally:
        await store.db.dispose()


async def test_a_reader_of_a_queued_turn_sees_it_start_at_once_even_when_it_starts_while_the_reader_reads(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queued turn's reader finds nothing stored and waits to be woken; a turn that starts while the
    reader reads the store must still wake it (not leave it for the next poll)."""
    monkeypatch.setattr(turns, "STORED_POLL_SECONDS", 600.0)
    monkeypatch.setattr(turns, "QUEUED_POLL_SECONDS", 600.0)
    settings = make_settings(max_running_turns=1)
    service = FleetService(settings, database=Database(str(settings.database_url)))
    await service.start()
    try:
        running, waiting = await one_running_one_queued(service, model_server)
        turns_and_events = service.parts.store.turns_and_events
        reads: list[str] = []

        async def start_it_meanwhile(readings: Sequence[tuple[str, int]], *, limit: int) -> list[Read | NotFound]:
            read = await turns_and_events(readings, limit=limit)
            reads.extend(turn_id for turn_id, _ in readings)
            if reads == [waiting.id]:
                await service.turns.cancel(running.id)  # the queued turn starts in its place
                while service.turns.channels.get(waiting.id) is None:
                    await asyncio.sleep(0.01)
            return read

        monkeypatch.setattr(service.parts.store, "turns_and_events", start_it_meanwhile)
        stream = await service.turns.events(waiting.id)
        first = await asyncio.wait_for(anext(aiter(stream)), 30)
        assert reads == [waiting.id] and first.type is EventType.TURN_STARTED  # one read: the turn with its events
        assert (await service.turns.wait(waiting.id)).answer == "my turn"
    finally:
        await service.stop()


async def test_a_reader_of_a_queued_turn_waits_without_rereading_the_store_and_sees_its_start_at_once(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a burst dozens of streams wait for room: each reads its queued turn once, then waits to be
    woken by the turn's start (not re-reading it every half second)."""
    settings = make_settings(max_running_turns=1)
    service = FleetService(settings, database=Database(str(settings.database_url)))
    await service.start()
    try:
        running, waiting = await one_running_one_queued(service, model_server)
        turns_and_events = service.parts.store.turns_and_events
        reads: list[str] = []

        async def counted(readings: Sequence[tuple[str, int]], *, limit: int) -> list[Read | NotFound]:
            reads.extend(turn_id for turn_id, _ in readings)
            return await turns_and_events(readings, limit=limit)

        monkeypatch.setattr(service.parts.store, "turns_and_events", counted)
        stream = aiter(await service.turns.events(waiting.id))
        first = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(2 * turns.STORED_POLL_SECONDS + 0.5)
        assert not first.done() and reads == [waiting.id]

        await service.turns.cancel(running.id)  # the queued turn starts in its place
        assert (await asyncio.wait_for(first, 30)).type is EventType.TURN_STARTED
        assert reads == [waiting.id]
        assert (await service.turns.wait(waiting.id)).answer == "my turn"
    finally:
        await service.stop()


async def test_a_reader_of_a_queued_turn_sees_it_start_in_another_process_sharing_the_embedded_database(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite nothing tells this process that another one on the same file claimed and started a
    queued turn: the one read that looks at every queued turn being waited on does, within a second,
    not the readers' own 5 s safety net."""
    monkeypatch.setattr(turns, "QUEUED_POLL_SECONDS", 600.0)
    settings = make_settings()
    if not str(settings.database_url).startswith("sqlite"):
        pytest.skip("on PostgreSQL the other process's start is notified")
    reader = FleetService(settings, database=Database(str(settings.database_url)))
    await reader.start(run_turns=False)  # runs no turns itself, as a process that only serves
    running: FleetService | None = None
    try:
        await reader.sessions.create(name="a")
        model_server.script("root", rlm_step("Quick.", "SUBMIT(answer='run elsewhere')"))
        waiting, _ = await reader.turns.submit("a", TurnSubmission(message="waits"))
        stream = aiter(await reader.turns.events(waiting.id))
        first = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.2)
        assert not first.done()

        running = FleetService(settings, database=Database(str(settings.database_url)))
        await running.start()  # its worker claims the queued turn and starts it
        assert (await asyncio.wait_for(first, 10)).type is EventType.TURN_STARTED
        assert (await running.turns.wait(waiting.id)).answer == "run elsewhere"
    finally:
        if running is not None:
            await running.stop()
        await reader.stop()


@pytest.fixture
async def held_service(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[FleetService, HeldStartBackend]]:
    """A service whose sandboxes wait to start until the test releases them (none started ahead)."""
    monkeypatch.setitem(registry.BACKENDS, "local-held", lambda: HeldStartBackend)
    settings = make_settings(sandbox_backend="local-held", sandbox_pool_size=0)
    fleet = FleetService(settings, database=Database(str(settings.database_url)))
    await fleet.start()
    backend = fleet.kernels.backend
    assert isinstance(backend, HeldStartBackend)
    try:
        yield fleet, backend
    finally:
        backend.release.set()
        await fleet.stop()


async def test_a_turn_is_seen_starting_while_its_sandbox_is_still_starting(
    held_service: tuple[FleetService, HeldStartBackend], model_server: ScriptedModelServer
) -> None:
    service, backend = held_service
    await service.sessions.create(name="s")
    model_server.script("root", rlm_step("Print.", "print('hi')"), rlm_step("Done.", "SUBMIT(answer='ok')"))
    turn, _ = await service.turns.submit("s", TurnSubmission(message="say hi", max_iterations=4))
    events = await service.turns.events(turn.id)
    first = await asyncio.wait_for(anext(events), 30)
    assert first.type is EventType.TURN_STARTED and first.seq == 1
    assert first.data["task"] == "say hi" and first.data["budget"]["max_iterations"] == 4
    assert first.data["sandbox"] == {"backend": "local-held", "isolated": backend.isolated}
    assert await asyncio.to_thread(backend.holding.wait, 30), "the sandbox was not being started"
    assert (await service.parts.store.get_turn(turn.id)).status == "running"
    assert [e.seq for e in await service.parts.store.events_after(turn.id)] == [1]  # stored before it was seen

    backend.release.set()
    seen = [first, *[e async for e in events]]
    assert seen[-1].type is EventType.TURN_COMPLETED
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert [e.type for e in seen].count(EventType.TURN_STARTED) == 1
    # The engine's events hang from the span of the turn as announced.
    assert all(e.span_id == first.span_id for e in seen if e.parent_span_id is None)
    assert {e.parent_span_id for e in seen if e.type is EventType.ITERATION_STARTED} == {first.span_id}
    await service.turns.wait(turn.id)
    stored = await service.parts.store.events_after(turn.id)
    assert [e.to_dict() for e in stored] == [e.to_dict() for e in seen]


async def test_a_turn_cancelled_while_its_sandbox_starts_ends_cancelled_after_its_start(
    held_service: tuple[FleetService, HeldStartBackend], model_server: ScriptedModelServer
) -> None:
    service, backend = held_service
    await service.sessions.create(name="s")
    model_server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"))
    turn, _ = await service.turns.submit("s", TurnSubmission(message="never mind"))
    events = await service.turns.events(turn.id)
    assert (await asyncio.wait_for(anext(events), 30)).type is EventType.TURN_STARTED
    assert await asyncio.to_thread(backend.holding.wait, 30)
    await service.turns.cancel(turn.id)
    backend.release.set()
    assert [e.type async for e in events] == [EventType.TURN_CANCELLED]
    done = await service.turns.wait(turn.id)
    assert done.status == "cancelled"
    stored = await service.parts.store.events_after(turn.id)
    assert [(e.seq, e.type) for e in stored] == [(1, EventType.TURN_STARTED), (2, EventType.TURN_CANCELLED)]
    assert model_server.model.requests_for("root") == []  # the engine never ran


async def events_until_the_end(service: FleetService, turn_id: str) -> list[Event]:
    return [event async for event in await service.turns.events(turn_id)]


async def test_a_turn_finishes_while_more_sandboxes_are_stuck_starting_than_the_loop_has_threads(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch, model_server: ScriptedModelServer
) -> None:
    """Sandbox starts take the pool's own threads, not the event loop's default executor: a running
    turn's file work (its artifacts collected at the end) goes on while other sessions' sandboxes hang
    starting, more of them than that executor has threads."""
    stuck = min(32, (os.cpu_count() or 1) + 4) + 1  # asyncio's default executor, plus one
    monkeypatch.setitem(registry.BACKENDS, "local-held", lambda: HeldStartBackend)
    settings = make_settings(
        sandbox_backend="local-held", sandbox_pool_size=0, sandbox_max_kernels=stuck + 2, max_running_turns=stuck + 2
    )
    service = FleetService(settings, database=Database(str(settings.database_url)))
    await service.start()
    backend = service.kernels.backend
    assert isinstance(backend, HeldStartBackend)
    backend.held_sessions = set()
    asked, go = threading.Event(), threading.Event()

    def finish_when_told(_: dict[str, Any]) -> str:
        asked.set()
        go.wait(60)
        return rlm_step("Done.", "SUBMIT(answer='ok')")

    try:
        await service.sessions.create(name="free")
        model_server.script("root", rlm_step("Write.", "open('artifacts/a.txt', 'w').write('kept')"), finish_when_told)
        turn, _ = await service.turns.submit("free", TurnSubmission(message="write a file"))
        assert await asyncio.to_thread(asked.wait, 60), "the turn never reached its second model call"

        held = [await service.sessions.create(name=f"stuck-{index}") for index in range(stuck)]
        backend.held_sessions.update(session.id for session in held)
        waiting = [(await service.turns.submit(session.name, TurnSubmission(message="wait")))[0] for session in held]
        for _ in range(600):
            if backend.waiting == LIFECYCLE_THREADS:
                break
            await asyncio.sleep(0.05)
        assert backend.waiting == LIFECYCLE_THREADS, f"{backend.waiting} sandbox starts are held"

        go.set()
        seen = await asyncio.wait_for(events_until_the_end(service, turn.id), 60)
        assert seen[-1].type is EventType.TURN_COMPLETED
        done = await service.parts.store.get_turn(turn.id)
        assert (done.status, done.answer) == ("completed", "ok")
        assert [r.path for r, _ in await service.files.in_session("free")] == ["artifacts/a.txt"]
        assert backend.waiting == LIFECYCLE_THREADS  # the others were still starting all along
        for stuck_turn in waiting:
            await service.turns.cancel(stuck_turn.id)
    finally:
        go.set()
        backend.release.set()
        await service.stop()


async def test_a_turn_started_alone_whose_program_cannot_be_read_ends_failed_and_frees_its_session(
    service: FleetService, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group commit fails, the start is stored alone, then reading the program it runs fails (the
    database blinking): the turn ends failed after its turn.started, not left running with its
    session refusing every next turn."""
    program = ProgramSpec(version="v1", generate_action=f"{FleetTask.instructions}\n\nBe brief.")
    await service.parts.store.add_program("v1", program.canonical_bytes().decode(), program.sha256, {})
    await service.parts.store.approve_program("v1", incumbent=None)
    commit_turns, get_program = service.parts.store.commit_turns, service.parts.store.get_program
    failures: list[str] = []

    async def group_commit_down(**parts: Any) -> TurnCommit:
        if parts.get("starts") and "commit" not in failures:
            failures.append("commit")
            raise OperationalError("BEGIN", {}, ConnectionResetError("connection reset by peer"))
        return await commit_turns(**parts)

    async def blinking(version: str) -> Any:
        if "read" not in failures:
            failures.append("read")
            raise OperationalError("SELECT", {}, ConnectionResetError("connection reset by peer"))
        return await get_program(version)

    monkeypatch.setattr(service.parts.store, "commit_turns", group_commit_down)
    monkeypatch.setattr(service.parts.store, "get_program", blinking)
    await service.sessions.create(name="s")
    turn, _ = await service.turns.submit("s", TurnSubmission(message="go"))
    done = await asyncio.wait_for(service.turns.wait(turn.id), 60)
    assert failures == ["commit", "read"]
    assert done.status == "failed" and "connection reset" in (done.error or "")
    stored = await service.parts.store.events_after(turn.id)
    assert [(e.seq, e.type) for e in stored] == [(1, EventType.TURN_STARTED), (2, EventType.TURN_FAILED)]

    model_server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"))
    after, _ = await service.turns.submit("s", TurnSubmission(message="again"))
    assert (await asyncio.wait_for(service.turns.wait(after.id), 60)).answer == "ok"


async def test_a_start_stored_by_a_commit_that_failed_on_its_way_back_runs_once_with_one_turn_started(
    service: FleetService, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dropped connection after COMMIT: the turn is running with its turn.started stored, though the
    service heard an error; storing the start alone then finds it already done, and the turn runs the
    program it was marked running with."""
    program = ProgramSpec(version="v1", generate_action=f"{FleetTask.instructions}\n\nSay it in haiku.")
    await service.parts.store.add_program("v1", program.canonical_bytes().decode(), program.sha256, {})
    await service.parts.store.approve_program("v1", incumbent=None)
    commit_turns = service.parts.store.commit_turns
    failed: list[int] = []

    async def lost_reply(**parts: Any) -> TurnCommit:
        commit = await commit_turns(**parts)
        if parts.get("starts") and not failed:
            failed.append(1)
            raise OperationalError("COMMIT", {}, ConnectionResetError("connection reset by peer"))
        return commit

    monkeypatch.setattr(service.parts.store, "commit_turns", lost_reply)
    await service.sessions.create(name="s")
    model_server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"))
    turn, _ = await service.turns.submit("s", TurnSubmission(message="go"))
    seen = [e async for e in await service.turns.events(turn.id)]
    done = await service.turns.wait(turn.id)
    assert failed, "the start's commit never failed"
    assert (done.status, done.answer, done.program_version) == ("completed", "ok", "v1")
    assert "Say it in haiku." in str(model_server.model.requests_for("root")[-1]["messages"])
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert [e.type for e in seen].count(EventType.TURN_STARTED) == 1
    stored = await service.parts.store.events_after(turn.id)
    assert [e.to_dict() for e in stored] == [e.to_dict() for e in seen]
