"""A sandbox whose worker dies or breaks its protocol is restarted: files kept, variables lost, the
model told exactly what happened, within the turn's bound; a cancel is never restarted."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from fleet_rlm.models.scripted import rlm_step
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.protocol.schema import validate_event
from fleet_rlm.sandbox.local import LocalSandboxBackend
from fleet_rlm.testing.processes import live_sandbox_pids

from ..sandbox.limits_probes import FILL_TMP_WITH_1GB
from .conftest import Harness, TurnRun

KEPT_AND_LOST = """print('the file says', open('files/kept.txt').read())
print('x survived:', 'x' in globals())
print('task:', task)
print('sub-model:', llm_query('hello'))"""
RESTARTED = "the sandbox restarted after {}; variables are lost, files in the workspace are kept"


def prompt_text(request: dict[str, Any]) -> str:
    """Everything a model request shows the model, as one text."""
    return "\n".join(str(message.get("content")) for message in request.get("messages") or [])


def restarts(run: TurnRun) -> list[Event]:
    events = run.of(EventType.SANDBOX_RESTARTED)
    for event in events:
        validate_event(event.to_dict())
    return events


def crash_then_carry_on(harness: Harness, crash: str, **settings: Any) -> TurnRun:
    harness.server.model.default = lambda request: "hi from the sub-model"
    harness.server.script(
        "root",
        rlm_step(
            "Write a file, set a variable, then crash.",
            f"open('files/kept.txt', 'w').write('written before')\nx = 41\nprint('about to crash', flush=True)\n{crash}",
        ),
        rlm_step("See what is left.", KEPT_AND_LOST),
        rlm_step("Done.", "SUBMIT(answer='carried on')"),
    )
    return harness.run("Crash once", **settings)


def test_a_worker_that_exits_is_restarted_and_the_model_is_told(harness: Harness) -> None:
    run = crash_then_carry_on(harness, "import os\nos._exit(3)")

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "carried on"
    said = prompt_text(harness.server.model.requests_for("root")[1])
    assert f"about to crash\n{RESTARTED.format('exit status 3')}" in said
    output = run.output_text()
    assert "the file says written before" in output  # files are kept
    assert "x survived: False" in output  # variables are lost
    assert "task: Crash once" in output  # inputs are given again
    assert "sub-model: hi from the sub-model" in output  # and so are the tools
    [event] = restarts(run)
    assert event.data == {"cause": "exit status 3", "restart": 1, "max_restarts": 3}
    first_iteration = run.of(EventType.ITERATION_STARTED)[0]
    assert (event.span_id, event.parent_span_id) == (first_iteration.span_id, first_iteration.parent_span_id)
    assert run.outcome.usage["sandbox_errors"] == 1
    assert not live_sandbox_pids(run.workspace)


def test_a_worker_that_kills_itself_is_restarted(harness: Harness) -> None:
    run = crash_then_carry_on(harness, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")

    assert run.outcome.status == "completed", run.outcome.error
    assert RESTARTED.format("SIGKILL") in prompt_text(harness.server.model.requests_for("root")[1])
    assert [e.data["cause"] for e in restarts(run)] == ["SIGKILL"]
    assert "x survived: False" in run.output_text()


def test_a_worker_that_breaks_its_protocol_is_restarted(harness: Harness) -> None:
    garbage = "import os\nfor fd in range(3, 1024):\n    try:\n        os.write(fd, b'not json\\n')\n    except OSError:\n        pass"
    run = crash_then_carry_on(harness, garbage)

    assert run.outcome.status == "completed", run.outcome.error
    [event] = restarts(run)
    assert event.data["cause"].startswith("a protocol error (unreadable reply: ")
    assert RESTARTED.format(event.data["cause"]) in prompt_text(harness.server.model.requests_for("root")[1])


def test_a_worker_whose_protocol_fds_are_closed_is_restarted(harness: Harness) -> None:
    run = crash_then_carry_on(harness, "import os\nos.closerange(3, 4096)")

    assert run.outcome.status == "completed", run.outcome.error
    assert [e.data["cause"] for e in restarts(run)] == ["exit status 1"]  # the worker could not reply
    said = prompt_text(harness.server.model.requests_for("root")[1])
    assert "OSError: [Errno 9] Bad file descriptor" in said  # what it printed as it went
    assert RESTARTED.format("exit status 1") in said
    assert "x survived: False" in run.output_text()


def test_a_worker_killed_at_the_memory_limit_is_restarted(harness: Harness) -> None:
    report = {row.name: row for row in LocalSandboxBackend().protections_report()}
    for name in ("memory cgroup", "sized /tmp"):
        if not report[name].enforced:
            pytest.skip(f"an OOM kill needs the {name}, not enforced here: {report[name].reason}")
    harness.server.script(
        "root",
        rlm_step("Fill /tmp.", FILL_TMP_WITH_1GB),
        rlm_step("Carry on.", "print(open('files/note.txt').read())\nSUBMIT(answer='carried on')"),
    )
    run = harness.run("Use memory", {"note.txt": "still here"}, sandbox_memory_mb=256)

    assert run.outcome.status == "completed", run.outcome.error
    cause = "SIGKILL at the 256 MB memory limit"
    assert [e.data["cause"] for e in restarts(run)] == [cause]
    assert RESTARTED.format(cause) in prompt_text(harness.server.model.requests_for("root")[1])
    assert "still here" in run.output_text()


def test_past_the_bound_the_turn_fails_with_a_one_line_reason(harness: Harness) -> None:
    harness.server.script(
        "root",
        rlm_step("Crash.", "import os\nos._exit(3)"),
        rlm_step("Crash again.", "import os\nos._exit(4)"),
        rlm_step("Never run.", "SUBMIT(answer='too late')"),
    )
    run = harness.run("Crash twice", max_sandbox_restarts=1)

    assert run.outcome.status == "failed"
    assert run.outcome.error == (
        "the sandbox crashed again (exit status 4) after 1 restart, the most one turn allows (max_sandbox_restarts)"
    )
    assert [e.data["cause"] for e in restarts(run)] == ["exit status 3"]
    [exhausted] = run.of(EventType.BUDGET_EXHAUSTED)
    assert exhausted.data == {"budget": "sandbox_restarts", "limit": 1}
    assert run.events[-1].data["reason"] == run.outcome.error
    assert not live_sandbox_pids(run.workspace)


def test_with_restarts_off_the_first_crash_fails_the_turn(harness: Harness) -> None:
    harness.server.script("root", rlm_step("Crash.", "import os\nos._exit(3)"))
    run = harness.run("Crash", max_sandbox_restarts=0)

    assert run.outcome.status == "failed"
    assert run.outcome.error == "the sandbox crashed (exit status 3) and restarts are off (max_sandbox_restarts is 0)"
    assert not restarts(run)


def test_a_child_agent_is_restarted_the_same_way(harness: Harness) -> None:
    parent = "result = spawn_agent('CHILD crashes once')\nSUBMIT(answer=f\"{result['status']}: {result['answer']}\")"
    harness.server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    harness.server.script_for_task(
        "root",
        "CHILD",
        rlm_step("Write, then crash.", "open('artifacts/part.txt', 'w').write('half')\nimport os\nos._exit(5)"),
        rlm_step("Finish.", "SUBMIT(answer=open('artifacts/part.txt').read() + ', x lost: ' + str('os' not in dir()))"),
    )
    run = harness.run("PARENT delegates")

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "completed: half, x lost: True"
    [event] = restarts(run)
    assert event.data == {"cause": "exit status 5", "restart": 1, "max_restarts": 3}
    [child] = run.of(EventType.CHILD_STARTED)
    child_iterations = {e.span_id for e in run.of(EventType.ITERATION_STARTED) if e.parent_span_id == child.span_id}
    assert event.span_id in child_iterations
    child_prompt = prompt_text(harness.server.model.requests_for("root")[-1])
    assert RESTARTED.format("exit status 5") in child_prompt
    assert not live_sandbox_pids(run.workspace)


def test_past_the_bound_a_child_fails_and_its_parent_carries_on(harness: Harness) -> None:
    parent = "result = spawn_agent('CHILD crashes twice')\nSUBMIT(answer=f\"{result['status']}: {result['error']}\")"
    harness.server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    harness.server.script_for_task(
        "root",
        "CHILD",
        rlm_step("Crash.", "import os\nos._exit(5)"),
        rlm_step("Crash again.", "import os\nos._exit(6)"),
    )
    run = harness.run("PARENT delegates", max_sandbox_restarts=1)

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == (
        "failed: the sandbox crashed again (exit status 6) after 1 restart, the most one turn allows "
        "(max_sandbox_restarts)"
    )
    assert [e.data["restart"] for e in restarts(run)] == [1]
    assert [e.data["outcome"] for e in run.of(EventType.CHILD_FINISHED)] == ["failed"]
    assert not live_sandbox_pids(run.workspace)


def test_a_cancel_during_a_long_execution_is_not_restarted(harness: Harness) -> None:
    harness.server.script(
        "root",
        rlm_step("Sleep.", "import time\nprint('started', flush=True)\ntime.sleep(60)"),
        rlm_step("Never run.", "SUBMIT(answer='restarted')"),
    )
    turn, events = harness.build("Anything")

    async def scenario() -> None:
        task = asyncio.ensure_future(turn.run())
        while not any(e.type is EventType.OUTPUT for e in events):
            await asyncio.sleep(0.05)
        turn.cancel()
        assert (await task).status == "cancelled"

    asyncio.run(scenario())
    time.sleep(0.5)  # the turn's thread had time to see its sandbox die
    assert events[-1].type is EventType.TURN_CANCELLED
    assert not [e for e in events if e.type is EventType.SANDBOX_RESTARTED]
    assert len(harness.server.model.requests_for("root")) == 1
    assert not live_sandbox_pids(turn.workspace.root)


def test_the_turn_deadline_is_not_restarted(harness: Harness) -> None:
    harness.server.script("root", rlm_step("Sleep.", "import time\ntime.sleep(60)"))
    run = harness.run("Anything", turn_timeout=3.0)

    assert run.outcome.status == "failed"
    assert run.outcome.error == "turn deadline of 3s exceeded"
    assert not restarts(run)
