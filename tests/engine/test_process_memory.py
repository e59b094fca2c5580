"""A finished turn leaves nothing of itself in DSPy's process-wide state, so a server's memory does not
grow with the turns it has run; a caller that traces the program (an optimizer) still sees its calls."""

from __future__ import annotations

from typing import Any

import dspy
from dspy.clients.base_lm import GLOBAL_HISTORY
from dspy.utils import DummyLM

from fleet_rlm.engine.lm import program_context
from fleet_rlm.engine.usage import TurnUsage
from fleet_rlm.models.scripted import rlm_step

from .conftest import Harness

PARENT = "r = spawn_agent('child helper')\nprint(llm_query('a word'))\nSUBMIT(answer=str(r['answer']))"


def script(harness: Harness) -> None:
    harness.server.model.default = lambda request: "word"
    harness.server.script_for_task("root", "PARENT", rlm_step("Delegate.", PARENT))
    harness.server.script_for_task("root", "child helper", rlm_step("Help.", "SUBMIT(answer='helped')"))


def test_a_finished_turn_leaves_no_trace_or_call_history_behind(harness: Harness) -> None:
    trace: list[Any] = dspy.settings.trace
    trace_before, history_before = len(trace), len(GLOBAL_HISTORY)
    script(harness)

    run = harness.run("PARENT delegates")

    assert run.outcome.status == "completed", run.outcome.error
    assert len(harness.server.model.requests) >= 3  # the parent, its llm_query and the child called the model
    assert len(dspy.settings.trace) == trace_before
    assert len(GLOBAL_HISTORY) == history_before


def predict_in_a_program_context() -> None:
    lm = DummyLM([{"answer": "yes"}])
    with program_context(lm, TurnUsage()):
        dspy.Predict("question -> answer")(question="Is it traced?")


def test_a_caller_tracing_a_program_still_sees_its_calls() -> None:
    """An optimizer (``dspy.context(trace=[])`` around a Fleet program in its thread) keeps its trace."""
    traced: list[Any] = []
    with dspy.context(trace=traced):
        predict_in_a_program_context()
    assert [type(predictor) for predictor, _inputs, _prediction in traced] == [dspy.Predict]

    before = len(dspy.settings.trace)
    predict_in_a_program_context()
    assert len(dspy.settings.trace) == before
