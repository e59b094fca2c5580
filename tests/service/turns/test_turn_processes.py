"""Turns whose engine runs in a turn process (``worker.turn_processes``): what a person sees is what a
turn on the server's own threads shows, and a turn process that dies fails only its turns."""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import EventType
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.processes import TurnProcesses
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.store import Database
from fleet_rlm.testing.settings import scripted_settings
from tests.service.test_lifecycle import SLOW, wait_for_output

pytestmark = pytest.mark.anyio


@pytest.fixture
async def service(model_server: ScriptedModelServer, home: Path) -> AsyncIterator[FleetService]:
    settings = scripted_settings(model_server, home, sandbox_pool_size=1, worker_turn_processes=1)
    fleet = FleetService(settings, database=Database.from_settings(settings))
    await fleet.start()
    yield fleet
    await fleet.stop()


def turn_process(service: FleetService) -> psutil.Process:
    assert isinstance(service.turns.engine, TurnProcesses)
    (child,) = service.turns.engine.children
    return psutil.Process(child.process.pid)


async def run(service: FleetService, session: str, message: str) -> tuple[str, str | None, list[EventType]]:
    turn, _ = await service.turns.submit(session, TurnSubmission(message=message))
    done = await service.turns.wait(turn.id)
    events = await service.parts.store.events_after(turn.id)
    return done.status, done.answer if done.status == "completed" else done.error, [e.type for e in events]


async def test_a_turn_in_a_turn_process_streams_calls_tools_remembers_and_keeps_its_kernel(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    await service.sessions.create(name="s")
    first = (
        "answer = llm_query('what is the capital of France?')\n"
        "print('sub says', answer)\n"
        "print(remember('the person asks about France', 'asked today'))\n"
        "open('artifacts/note.txt', 'w').write(answer)\n"
        "x = 41"
    )
    model_server.script("root", rlm_step("Ask.", first), rlm_step("Done.", "SUBMIT(answer=answer)"))
    model_server.script("sub", "Paris")
    status, answer, types = await run(service, "s", "capital?")
    assert (status, answer) == ("completed", "Paris")
    for expected in (EventType.TOOL_STARTED, EventType.TOOL_FINISHED, EventType.MEMORY_PROPOSED):
        assert expected in types
    turn = (await service.parts.store.list_turns((await service.sessions.get("s")).id))[0]
    outputs = [e.data["text"] for e in await service.parts.store.events_after(turn.id) if e.type is EventType.OUTPUT]
    assert "sub says Paris" in "".join(outputs)
    assert [e.text for e in await service.memory.entries()] == ["the person asks about France"]
    assert [r.path for r, _ in await service.files.in_session("s")] == ["artifacts/note.txt"]

    # The session's kernel lives in the server, so the next turn (in any turn process) finds x.
    model_server.script("root", rlm_step("Use x.", "SUBMIT(answer=str(x + 1))"))
    assert (await run(service, "s", "x + 1?"))[:2] == ("completed", "42")


async def test_failing_and_crashing_code_is_reported_as_on_the_servers_own_threads(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    """What crosses from the sandbox to the engine in another process keeps its parts: the failed
    line and type of an exception, and a crash's cause and the output before it."""
    await service.sessions.create(name="s")
    model_server.script(
        "root",
        rlm_step("Divide.", "x = 41\nprint(1 / 0)"),
        rlm_step("Crash.", "print('about to crash', flush=True)\nimport os\nos._exit(3)"),
        rlm_step("Carry on.", "print('x survived:', 'x' in globals())"),
        rlm_step("Done.", "SUBMIT(answer='carried on')"),
    )
    turn, _ = await service.turns.submit("s", TurnSubmission(message="fail then crash"))
    done = await service.turns.wait(turn.id)
    assert (done.status, done.answer) == ("completed", "carried on")
    events = await service.parts.store.events_after(turn.id)
    [failed] = [e.data for e in events if e.type is EventType.EXECUTION_FAILED]
    assert (failed["error_type"], failed["line"]) == ("ZeroDivisionError", 2)
    [restarted] = [e.data for e in events if e.type is EventType.SANDBOX_RESTARTED]
    assert restarted["cause"] == "exit status 3"
    said = str(model_server.model.requests_for("root")[2])
    assert "about to crash" in said and "the sandbox restarted after exit status 3" in said
    output = "".join(str(e.data["text"]) for e in events if e.type is EventType.OUTPUT)
    assert "x survived: False" in output


async def test_child_agents_run_from_a_turn_process(service: FleetService, model_server: ScriptedModelServer) -> None:
    await service.sessions.create(name="s")
    parent = "r = spawn_agent('child count')\nSUBMIT(answer=str(r['answer']))"
    model_server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    model_server.script_for_task("root", "child count", rlm_step("Count.", "SUBMIT(answer=str(sum(range(10))))"))
    status, answer, types = await run(service, "s", "PARENT delegates")
    assert (status, answer) == ("completed", "45")
    assert EventType.CHILD_FINISHED in types


async def test_cancel_reaches_code_running_for_a_turn_process(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    await service.sessions.create(name="s")
    model_server.script("root", rlm_step("Slow.", SLOW))
    turn, _ = await service.turns.submit("s", TurnSubmission(message="slow"))
    await wait_for_output(service, turn.id, "started")
    asked = time.monotonic()
    await service.turns.cancel(turn.id)
    done = await service.turns.wait(turn.id)
    assert done.status == "cancelled"
    assert time.monotonic() - asked < 5
    model_server.script("root", rlm_step("Quick.", "SUBMIT(answer='still works')"))
    assert (await run(service, "s", "again"))[:2] == ("completed", "still works")


async def test_a_killed_turn_process_fails_its_turn_and_is_replaced(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    await service.sessions.create(name="s")
    doomed = turn_process(service)
    model_server.script("root", rlm_step("Slow.", SLOW))
    turn, _ = await service.turns.submit("s", TurnSubmission(message="slow"))
    await wait_for_output(service, turn.id, "started")
    doomed.send_signal(signal.SIGKILL)
    done = await service.turns.wait(turn.id)
    assert done.status == "failed"
    assert done.error is not None and "engine process ended unexpectedly" in done.error
    events = await service.parts.store.events_after(turn.id)
    assert [e.type for e in events if e.terminal] == [EventType.TURN_FAILED]

    model_server.script("root", rlm_step("Quick.", "SUBMIT(answer='on a new process')"))
    assert (await run(service, "s", "again"))[:2] == ("completed", "on a new process")
    assert turn_process(service).pid != doomed.pid


async def test_sandbox_code_cannot_reach_the_turn_process(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    """The turn process (root, holding the model keys) is outside the sandbox's process namespace and
    holds no file descriptor the sandbox inherits: signalling its pid reaches nothing of it."""
    await service.sessions.create(name="s")
    target = turn_process(service)
    attack = (
        "import os, signal\n"
        f"try:\n    os.kill({target.pid}, signal.SIGKILL)\n    print('sent')\nexcept OSError as e:\n    print('refused', e)\n"
        "fds = []\n"
        "for fd in os.listdir('/proc/self/fd'):\n"
        "    try:\n        fds.append(os.readlink(f'/proc/self/fd/{fd}'))\n"
        "    except OSError:\n        pass\n"
        "print('fds', fds)\n"
        "SUBMIT(answer='tried')"
    )
    model_server.script("root", rlm_step("Attack.", attack))
    turn, _ = await service.turns.submit("s", TurnSubmission(message="attack"))
    done = await service.turns.wait(turn.id)
    assert (done.status, done.answer) == ("completed", "tried")
    said = "".join(
        str(e.data["text"]) for e in await service.parts.store.events_after(turn.id) if e.type is EventType.OUTPUT
    )
    assert "fds [" in said and "socket:" not in said, said
    assert "refused" in said and "sent" not in said.split("fds")[0], said
    assert target.is_running() and target.status() != psutil.STATUS_ZOMBIE
    assert turn_process(service).pid == target.pid


async def test_a_kernel_printing_in_the_background_does_not_disturb_its_next_turns(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    """A kernel's threads may print while the next turn is handed the kernel: those reports reach
    a turn process before it has heard of that sandbox, and must not break it."""
    await service.sessions.create(name="s")
    chatter = (
        "import threading, time\n"
        "def chatter():\n    while True:\n        print('tick', flush=True)\n        time.sleep(0.002)\n"
        "threading.Thread(target=chatter, daemon=True).start()\n"
        "SUBMIT(answer='started')"
    )
    model_server.script("root", rlm_step("Chatter.", chatter))
    assert (await run(service, "s", "chatter"))[:2] == ("completed", "started")
    pid = turn_process(service).pid
    for index in range(3):
        model_server.script("root", rlm_step("Again.", f"SUBMIT(answer='turn {index}')"))
        assert (await run(service, "s", f"turn {index}"))[:2] == ("completed", f"turn {index}")
    assert turn_process(service).pid == pid, "the turn process died"


async def test_a_turn_its_turn_process_cannot_start_fails_at_once(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    await service.sessions.create(name="s")
    model_server.script(
        "root",
        rlm_step(
            "Break tmp.", "import shutil\nshutil.rmtree('tmp')\nopen('tmp', 'w').write('x')\nSUBMIT(answer='done')"
        ),
    )
    assert (await run(service, "s", "break"))[:2] == ("completed", "done")
    pid = turn_process(service).pid
    asked = time.monotonic()
    status, error, types = await run(service, "s", "next")
    assert status == "failed" and error is not None, error
    assert time.monotonic() - asked < 15
    assert types[-1] is EventType.TURN_FAILED
    assert turn_process(service).pid == pid


async def test_a_cancel_ends_the_turn_even_when_its_turn_process_does_not_answer(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    await service.sessions.create(name="s")
    stuck = turn_process(service)
    model_server.script("root", rlm_step("Slow.", SLOW))
    turn, _ = await service.turns.submit("s", TurnSubmission(message="slow"))
    await wait_for_output(service, turn.id, "started")
    stuck.suspend()
    try:
        asked = time.monotonic()
        await service.turns.cancel(turn.id)
        done = await service.turns.wait(turn.id)
        assert done.status == "cancelled"
        assert time.monotonic() - asked < 10
    finally:
        stuck.resume()
    model_server.script("root", rlm_step("Quick.", "SUBMIT(answer='still works')"))
    assert (await run(service, "s", "again"))[:2] == ("completed", "still works")


async def test_stopping_the_service_ends_its_turn_processes_at_once(
    model_server: ScriptedModelServer, home: Path
) -> None:
    settings = scripted_settings(model_server, home, sandbox_pool_size=0, worker_turn_processes=2)
    fleet = FleetService(settings, database=Database.from_settings(settings))
    await fleet.start()
    await fleet.sessions.create(name="s")
    model_server.script("root", rlm_step("Quick.", "SUBMIT(answer='ok')"))
    assert (await run(fleet, "s", "go"))[:2] == ("completed", "ok")
    assert isinstance(fleet.turns.engine, TurnProcesses)
    children = [child.process for child in fleet.turns.engine.children]
    stopping = time.monotonic()
    await fleet.stop()
    assert time.monotonic() - stopping < 8
    assert [child.poll() for child in children] == [0, 0], "a turn process did not end by itself"
