"""DSPy callbacks installed by someone else (MLflow's autologging, a tracer) keep working during Fleet's
turns: Fleet adds its own callbacks to them rather than replacing them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import dspy
import pytest
from dspy.utils import BaseCallback

from fleet_rlm.models.scripted import rlm_step
from fleet_rlm.protocol.events import EventType

from .conftest import Harness


class Recorder(BaseCallback):  # type: ignore[misc]
    """A foreign callback: counts the model calls and ``dspy.RLM`` runs it sees, from any thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.model_calls = 0
        self.programs = 0
        self.executions: list[str] = []
        self.tool_calls: list[str] = []

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        with self.lock:
            self.model_calls += 1

    def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        with self.lock:
            self.programs += isinstance(instance, dspy.RLM)

    def on_interpreter_execute_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        with self.lock:
            self.executions.append(inputs["code"])

    def on_interpreter_tool_call_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        with self.lock:
            self.tool_calls.append(inputs["tool_name"])


@pytest.fixture
def foreign() -> Iterator[Recorder]:
    installed = list(dspy.settings.callbacks)
    recorder = Recorder()
    dspy.configure(callbacks=[*installed, recorder])
    try:
        yield recorder
    finally:
        dspy.configure(callbacks=installed)


@pytest.mark.parametrize("streamed", [True, False])
def test_a_globally_installed_callback_sees_the_turn(harness: Harness, foreign: Recorder, streamed: bool) -> None:
    harness.server.script(
        "root", rlm_step("Compute.", "x = 6 * 7\nprint(x)"), rlm_step("Answer.", "SUBMIT(answer=str(x))")
    )
    run = harness.run("six times seven", lm_stream=streamed)

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "42"
    assert foreign.model_calls >= 2
    assert foreign.programs == 1
    # Fleet's own callbacks still run alongside: the iterations are reported.
    assert [e.data["iteration"] for e in run.of(EventType.ITERATION_STARTED)] == [1, 2]
    assert dspy.settings.callbacks[-1] is foreign  # the turn left the installed callbacks as they were
    # The sandbox fires DSPy's interpreter callbacks, as DSPy's own interpreters do (e.g. for MLflow tracing).
    assert "x = 6 * 7\nprint(x)" in foreign.executions and "SUBMIT(answer=str(x))" in foreign.executions


def test_a_globally_installed_callback_sees_a_child_agent(harness: Harness, foreign: Recorder) -> None:
    parent = "r = spawn_agent('child helper')\nSUBMIT(answer=str(r['answer']))"
    harness.server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    harness.server.script_for_task("root", "child helper", rlm_step("Help.", "SUBMIT(answer='helped')"))
    run = harness.run("PARENT delegates")

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "helped"
    assert foreign.model_calls >= 2  # the parent's call and the child's
    assert foreign.programs == 2  # the parent's dspy.RLM and the child's
    assert "spawn_agent" in foreign.tool_calls  # the parent's sandbox called the host tool
    child_span = run.of(EventType.CHILD_STARTED)[0].span_id
    assert [e for e in run.of(EventType.ITERATION_STARTED) if e.parent_span_id == child_span]
