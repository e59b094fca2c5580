"""Two API replicas and two workers over one PostgreSQL database, as separate processes: turns queued on
any replica are claimed by a worker, streamed from any replica, cancelled from any replica, survive a
worker's kill -9 (its turn ends interrupted once its lease lapses) and a rolling restart of everything."""

from __future__ import annotations

import contextlib
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from fleet_rlm.api.client import FleetClient
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.service.turns.processes.processes import CHILD_MODULE
from tests.api.server import ServerProcess

from .processes import Topology

pytestmark = pytest.mark.postgres

SLOW = "print('started', flush=True)\nimport time\ntime.sleep(60)\nSUBMIT(answer='too late')"


def answer_step(text: str) -> str:
    return rlm_step("Answer.", f"print('working on {text}')\nSUBMIT(answer={text!r})")


def wait_for_output(events: list[Event], follow: object, text: str) -> None:
    for event in follow:  # type: ignore[attr-defined]
        events.append(event)
        if event.type is EventType.OUTPUT and text in str(event.data["text"]):
            return
    raise AssertionError(f"the turn ended before printing {text!r}")


FINISHING = "print('started', flush=True)\nimport time\ntime.sleep(10)\nSUBMIT(answer='finished')"
"""A turn's code that is still running for 10 s after it prints, then answers."""


def submit_running(client: FleetClient, model_server: ScriptedModelServer, session: str, code: str) -> dict[str, Any]:
    """A turn in a new session ``session`` whose one step runs ``code``."""
    client.create_session(name=session)
    model_server.script("root", rlm_step("Work.", code))
    return client.submit_turn(session, f"run the code of {session}")


def wait_for_log(log: Path, text: str, seconds: float = 30) -> None:
    """Until the process's log says ``text``."""
    deadline = time.monotonic() + seconds
    while text not in log.read_text():
        assert time.monotonic() < deadline, f"{log.name} never said {text!r}"
        time.sleep(0.05)


def assert_whole(events: list[Event], last: EventType) -> None:
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "an event was lost or repeated"
    assert events[0].type is EventType.TURN_STARTED
    assert [e.type for e in events if e.terminal] == [last]


def test_a_turn_queued_on_one_replica_is_claimed_by_a_worker_and_streamed_whole_from_the_other(
    topology: Topology, model_server: ScriptedModelServer
) -> None:
    topology.start()
    replica_a, replica_b = topology.client(0), topology.client(1)
    names = [f"s{i}" for i in range(6)]
    for name in names:
        replica_b.create_session(name=name)
        model_server.script_for_task("root", f"task of {name}", answer_step(name))
    turns = [replica_b.submit_turn(name, f"task of {name}") for name in names]

    for name, turn in zip(names, turns, strict=True):
        events = list(replica_a.follow(turn["id"]))
        assert_whole(events, EventType.TURN_COMPLETED)
        assert any(e.type is EventType.OUTPUT and f"working on {name}" in str(e.data["text"]) for e in events)
        assert replica_a.turn(turn["id"])["answer"] == name
        assert replica_b.turn(turn["id"])["status"] == "completed"
    runners = [topology.runner_of(turn["id"]) for turn in turns]
    assert all(runners), "a completed turn names no runner"
    worker_pids = {str(worker.pid) for worker in topology.workers}
    assert {runner.rsplit(":", 2)[1] for runner in runners if runner} <= worker_pids, "a replica ran a turn"


def test_a_worker_killed_mid_turn_leaves_the_turn_interrupted_within_15s_and_the_session_usable(
    topology: Topology, model_server: ScriptedModelServer
) -> None:
    """At the default lease (``worker.lease_seconds``, 10 s)."""
    topology.start()
    client = topology.client(0)
    client.create_session(name="doomed")
    model_server.script("root", rlm_step("Slow.", SLOW))
    turn = client.submit_turn("doomed", "take forever")
    seen: list[Event] = []
    wait_for_output(seen, client.follow(turn["id"]), "started")

    worker = topology.worker_running(turn["id"])
    turn_processes = [child for child in psutil.Process(worker.pid).children() if CHILD_MODULE in child.cmdline()]
    assert turn_processes, "the worker runs its turns' engines in a turn process"
    worker.kill()
    killed = time.monotonic()
    while client.turn(turn["id"])["status"] != "interrupted":
        assert time.monotonic() - killed < 15, "the dead worker's turn is still active"
        time.sleep(0.1)

    _, alive = psutil.wait_procs(turn_processes, timeout=10)
    assert not alive, "a dead worker's turn processes outlive it"

    replay = list(topology.client(1).follow(turn["id"]))
    assert_whole(replay, EventType.TURN_INTERRUPTED)
    assert [e.seq for e in replay[: len(seen)]] == [e.seq for e in seen]

    model_server.script("root", answer_step("again"))
    retry = client.submit_turn("doomed", "try again")
    assert_whole(list(client.follow(retry["id"])), EventType.TURN_COMPLETED)
    assert client.turn(retry["id"])["answer"] == "again"


def test_a_cancel_sent_to_the_other_replica_reaches_the_worker_within_a_second(
    topology: Topology, model_server: ScriptedModelServer
) -> None:
    topology.start()
    replica_a, replica_b = topology.client(0), topology.client(1)
    replica_a.create_session(name="stop-me")
    model_server.script("root", rlm_step("Slow.", SLOW))
    turn = replica_a.submit_turn("stop-me", "take forever")
    events: list[Event] = []
    follow = replica_a.follow(turn["id"])
    wait_for_output(events, follow, "started")

    asked = time.monotonic()
    replica_b.cancel(turn["id"])
    events.extend(follow)
    ended = time.monotonic() - asked

    assert_whole(events, EventType.TURN_CANCELLED)
    assert ended < 1.0, f"the cancel took {ended:.2f}s to end the turn"
    assert replica_b.turn(turn["id"])["status"] == "cancelled"


def stream_completion(replica: ServerProcess, session: str) -> Iterator[tuple[str, Iterator[str]]]:
    """An OpenAI-compatible streamed completion in ``session`` through ``replica``, read until the
    turn's code prints 'started'; yields the turn id and the rest of the stream's lines."""
    body = {"model": "fleet-rlm", "messages": [{"role": "user", "content": "Work."}], "stream": True}
    with (
        httpx.Client(base_url=replica.base_url, timeout=60) as http,
        http.stream("POST", "/v1/chat/completions", json=body, headers={"X-Fleet-Session": session}) as response,
    ):
        assert response.status_code == 200, response.read()
        lines = response.iter_lines()
        assert any("started" in line for line in lines), "the stream ended before the turn started"
        yield response.headers["x-fleet-turn"], lines


def test_an_openai_compatible_client_that_leaves_cancels_its_turn_on_the_worker_within_a_second(
    topology: Topology, model_server: ScriptedModelServer
) -> None:
    topology.start(replicas=1, workers=1)
    model_server.script("root", rlm_step("Slow.", SLOW))
    with contextlib.contextmanager(stream_completion)(topology.replicas[0], "left") as (turn_id, _):
        left = time.monotonic()
    client = topology.client(0)
    events = list(client.follow(turn_id))
    assert time.monotonic() - left < 1.0, "the turn outlived its client by more than a second"
    assert_whole(events, EventType.TURN_CANCELLED)


def test_an_openai_compatible_stream_cut_by_its_replicas_restart_leaves_the_turn_to_finish(
    topology: Topology, model_server: ScriptedModelServer
) -> None:
    """Its client did not leave: the replica did. The turn, which a worker runs, finishes; the session's
    history has its answer."""
    topology.start(replicas=2, workers=1)
    model_server.script("root", rlm_step("Work.", FINISHING))
    with contextlib.contextmanager(stream_completion)(topology.replicas[0], "cut") as (turn_id, lines):
        topology.replicas[0].stop()
        rest: list[str] = []
        with contextlib.suppress(httpx.HTTPError):  # cut mid-chunk, or closed at a chunk's end
            rest.extend(lines)
        assert not any("finished" in line for line in rest)
    other = topology.client(1)
    assert_whole(list(other.follow(turn_id)), EventType.TURN_COMPLETED)
    assert other.turn(turn_id)["answer"] == "finished"


def test_a_sessions_turns_go_to_the_worker_keeping_its_kernel_whichever_replica_takes_them(
    topology: Topology, model_server: ScriptedModelServer
) -> None:
    topology.start()
    topology.client(0).create_session(name="kept")
    model_server.script("root", rlm_step("Start.", "x = 1\nSUBMIT(answer=str(x))"))
    model_server.script("root", *(rlm_step("Add one.", "x += 1\nSUBMIT(answer=str(x))") for _ in range(4)))
    runners = []
    for index in range(5):
        client = topology.client(index % 2)
        turn = client.submit_turn("kept", f"turn {index}")
        events = list(client.follow(turn["id"]))
        assert_whole(events, EventType.TURN_COMPLETED)
        assert client.turn(turn["id"])["answer"] == str(index + 1)
        assert not any(e.type is EventType.KERNEL_RESTORED for e in events), "the live kernel was not used"
        runners.append(topology.runner_of(turn["id"]))
    assert len(set(runners)) == 1, f"the session's turns moved between workers: {runners}"


def test_a_kernel_restart_asked_of_a_replica_ends_the_kernel_a_worker_keeps_and_the_next_turn_is_told(
    topology: Topology, model_server: ScriptedModelServer
) -> None:
    topology.start(replicas=1, workers=1)
    client = topology.client(0)
    client.create_session(name="restarted")
    model_server.script("root", rlm_step("Keep.", "x = 41\nSUBMIT(answer=str(x))"))
    model_server.script("root", rlm_step("Look.", "SUBMIT(answer=str('x' in globals()))"))
    first = client.submit_turn("restarted", "keep x")
    assert_whole(list(client.follow(first["id"])), EventType.TURN_COMPLETED)

    client.restart_kernel("restarted")
    second = client.submit_turn("restarted", "look for x")
    events = list(client.follow(second["id"]))
    assert_whole(events, EventType.TURN_COMPLETED)
    assert client.turn(second["id"])["answer"] == "False", "the worker's kernel outlived its restart"
    [evicted] = [e for e in events if e.type is EventType.KERNEL_EVICTED]
    assert evicted.data["reason"] == "restart"
    [restored] = [e for e in events if e.type is EventType.KERNEL_RESTORED]
    assert restored.data["restored"] == [] and [lost["name"] for lost in restored.data["lost"]] == ["x"]
    assert topology.runner_of(second["id"]) == topology.runner_of(first["id"]), "the same worker ran both"


@pytest.mark.timeout(600)
def test_a_rolling_restart_of_every_process_loses_no_turn_and_no_event(
    topology: Topology, model_server: ScriptedModelServer
) -> None:
    topology.start()
    sessions = [f"r{i}" for i in range(4)]
    for name in sessions:
        topology.client(0).create_session(name=name)
    submitted: list[str] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def submit_forever(name: str) -> None:
        """One session's turns, one after another, through whichever replica answers."""
        count = 0
        try:
            while not stop.is_set():
                count += 1
                task = f"{name} turn {count}"
                model_server.script_for_task(
                    "root", task, rlm_step("Work.", f"import time\ntime.sleep(0.5)\nSUBMIT(answer={task!r})")
                )
                turn = _through_any_replica(topology, lambda client, task=task: client.submit_turn(name, task))
                submitted.append(turn["id"])
                while _through_any_replica(topology, lambda client, turn=turn: client.turn(turn["id"]))["status"] in (
                    "queued",
                    "running",
                ):
                    time.sleep(0.1)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=submit_forever, args=(name,)) for name in sessions]
    for thread in threads:
        thread.start()
    time.sleep(2)
    for index, old in enumerate(list(topology.workers)):
        drained = time.monotonic()
        assert old.terminate() == 0, "a draining worker did not exit cleanly"
        print(f"worker {index} drained in {time.monotonic() - drained:.1f}s")
        topology.workers.remove(old)
        topology.add_worker()
        time.sleep(1)
    for index in range(len(topology.replicas)):
        topology.replicas[index].stop()
        topology.replicas[index].start()
        time.sleep(1)
    time.sleep(2)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors

    client = topology.client(0)
    assert len(submitted) >= 3 * len(sessions), "the restarts stalled the turns"
    for turn_id in submitted:
        turn = client.turn(turn_id)
        assert turn["status"] == "completed", (turn_id, turn["status"], turn.get("error"))
        assert_whole(list(client.follow(turn_id)), EventType.TURN_COMPLETED)
    stored = sum(len(client.turns(name)) for name in sessions)
    assert stored == len(submitted)


def _through_any_replica(topology: Topology, call: object) -> dict:  # type: ignore[type-arg]
    """The call's result from the first replica that answers (one may be restarting)."""
    last: Exception | None = None
    for _ in range(100):
        for index in range(len(topology.replicas)):
            try:
                with topology.client(index) as client:
                    return call(client)  # type: ignore[operator,no-any-return]
            except Exception as exc:  # a replica restarting: the other answers
                last = exc
        time.sleep(0.1)
    raise AssertionError(f"no replica answered: {last}")


def test_fleet_serve_running_turns_itself_drains_on_sigterm_and_another_replica_streams_the_end(
    topology: Topology, model_server: ScriptedModelServer
) -> None:
    """``fleet serve`` with its own workers (the default) on PostgreSQL, stopped mid-turn as in a rolling
    restart: it takes no new turns, lets the running one finish, and exits cleanly; the replica that stays
    serves the whole turn."""
    topology.start(replicas=1, workers=0)
    serving = ServerProcess({**topology.env, "FLEET_WORKER_IN_SERVER": "true"}, topology.logs / "serve.log", cli=True)
    serving.start()
    try:
        with FleetClient(serving.base_url) as client:
            turn = submit_running(client, model_server, "restarted", FINISHING)
            wait_for_output([], client.follow(turn["id"]), "started")
        assert serving.process is not None
        serving.process.send_signal(signal.SIGTERM)
        # uvicorn ends by raising the signal it caught again, once it has shut down (a service manager
        # counts that as a clean stop).
        assert serving.process.wait(timeout=90) == -signal.SIGTERM

        other = topology.client(0)
        ended = other.turn(turn["id"])
        assert (ended["status"], ended["answer"]) == ("completed", "finished"), ended.get("error")
        assert_whole(list(other.follow(turn["id"])), EventType.TURN_COMPLETED)
        assert "draining: no new turns; 1 running" in serving.log.read_text()
    finally:
        serving.stop()


def test_a_worker_sent_sigterm_mid_turn_lets_the_turn_finish_and_exits_cleanly(
    topology: Topology, model_server: ScriptedModelServer
) -> None:
    topology.start(replicas=1, workers=1)
    client = topology.client(0)
    turn = submit_running(client, model_server, "drained", FINISHING)
    wait_for_output([], client.follow(turn["id"]), "started")

    (worker,) = topology.workers
    assert worker.terminate(timeout=90) == 0, "a draining worker did not exit cleanly"
    ended = client.turn(turn["id"])
    assert (ended["status"], ended["answer"]) == ("completed", "finished"), ended.get("error")
    assert_whole(list(client.follow(turn["id"])), EventType.TURN_COMPLETED)


def test_a_second_signal_cuts_a_drain_short_and_the_running_turns_end_interrupted(
    topology: Topology, model_server: ScriptedModelServer
) -> None:
    """Ctrl-C twice: the operator will not wait for the turns (a drain lasts up to a minute)."""
    topology.start(replicas=1, workers=1)
    client = topology.client(0)
    turn = submit_running(client, model_server, "cut", SLOW)
    wait_for_output([], client.follow(turn["id"]), "started")

    (worker,) = topology.workers
    assert worker.process is not None
    worker.process.send_signal(signal.SIGINT)
    wait_for_log(worker.log, "draining")
    worker.process.send_signal(signal.SIGINT)
    assert worker.process.wait(timeout=20) == 0, "the worker went on draining"
    ended = client.turn(turn["id"])
    assert ended["status"] == "interrupted", ended
    assert_whole(list(client.follow(turn["id"])), EventType.TURN_INTERRUPTED)
    assert "the drain was cut short: 1 running" in worker.log.read_text()


def test_a_second_signal_cuts_fleet_serves_drain_short(topology: Topology, model_server: ScriptedModelServer) -> None:
    topology.start(replicas=1, workers=0)
    serving = ServerProcess({**topology.env, "FLEET_WORKER_IN_SERVER": "true"}, topology.logs / "serve.log", cli=True)
    serving.start()
    try:
        with FleetClient(serving.base_url) as client:
            turn = submit_running(client, model_server, "cut", SLOW)
            wait_for_output([], client.follow(turn["id"]), "started")
        assert serving.process is not None
        serving.process.send_signal(signal.SIGTERM)
        wait_for_log(serving.log, "draining")
        serving.process.send_signal(signal.SIGINT)
        serving.process.wait(timeout=20)
        ended = topology.client(0).turn(turn["id"])
        assert ended["status"] == "interrupted", ended
        assert "the drain was cut short: 1 running" in serving.log.read_text()
    finally:
        serving.stop()


def test_a_client_following_a_turn_on_a_replica_that_restarts_gets_every_event_once(
    topology: Topology, model_server: ScriptedModelServer
) -> None:
    """The stream breaks when its replica stops; the client reconnects (``Last-Event-ID``) once the
    replica is back and reads on from the database, without a gap or a repeat."""
    topology.start(replicas=1, workers=1)
    client = topology.client(0)
    ticking = "import time\nfor i in range(100):\n    print('tick', i, flush=True)\n    time.sleep(0.1)\nSUBMIT(answer='done')"
    turn = submit_running(client, model_server, "followed", ticking)
    events: list[Event] = []
    follower = threading.Thread(target=lambda: events.extend(client.follow(turn["id"])))
    follower.start()
    deadline = time.monotonic() + 30
    while not any(e.type is EventType.OUTPUT and "tick 5" in str(e.data["text"]) for e in list(events)):
        assert time.monotonic() < deadline, "the turn did not start ticking"
        time.sleep(0.05)

    (replica,) = topology.replicas
    replica.stop()
    replica.start()
    follower.join(timeout=60)

    assert not follower.is_alive(), "the follower did not reach the turn's end"
    assert_whole(events, EventType.TURN_COMPLETED)
    printed = "".join(str(e.data["text"]) for e in events if e.type is EventType.OUTPUT)
    assert [int(n) for n in re.findall(r"tick (\d+)", printed)] == list(range(100))
