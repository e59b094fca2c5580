"""``fleet_metric`` exactly as docs/evaluation.md states it, with a scripted judge model over real HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dspy
import pytest

from fleet_rlm.models.scripted import Reply, ScriptedModelServer
from fleet_rlm.quality.metric import FleetMetric, build_fleet_metric, efficiency, usage_measured
from fleet_rlm.testing.settings import scripted_settings

from .conftest import JUDGE, judge_says

USAGE = {"model_calls": 3, "sandbox_errors": 0, "input_tokens": 100, "output_tokens": 20, "children": 0}


@pytest.fixture
def metric(model_server: ScriptedModelServer, home: Path) -> FleetMetric:
    return build_fleet_metric(scripted_settings(model_server, home, judge_lm_model=f"openai/{JUDGE}"))


def gold(**expectations: Any) -> dspy.Example:
    return dspy.Example(task="What is the total revenue?", answer="The total is 250.", expectations=expectations)


def pred(answer: str | None = "Total revenue: 250.", **fields: Any) -> dspy.Prediction:
    values: dict[str, Any] = {
        "answer": answer,
        "route": "rlm",
        "usage": dict(USAGE),
        "artifacts": {},
        "unverified_reason": None,
        "error": None,
    }
    values.update(fields)
    return dspy.Prediction(**values)


def test_a_correct_answer_scores_by_efficiency(metric: FleetMetric, model_server: ScriptedModelServer) -> None:
    model_server.script(JUDGE, judge_says(True), judge_says(True), judge_says(True))
    best = metric(gold(value=250), pred())
    assert isinstance(best, dspy.Prediction) and best.score == pytest.approx(1.0)
    assert "efficiency 1.000" in best.feedback
    slower = metric(gold(), pred(usage={**USAGE, "model_calls": 13, "sandbox_errors": 2}))
    # efficiency = 1 - 0.015 * (13 - 3) - 0.15 * 2 = 0.55
    assert slower.score == pytest.approx(0.9 + 0.1 * 0.55)
    worst = metric(gold(), pred(usage={**USAGE, "model_calls": 200, "sandbox_errors": 9}))
    assert worst.score == pytest.approx(0.9)  # efficiency never below 0
    prompt = str(model_server.model.requests_for(JUDGE)[0]["messages"])
    assert "The total is 250." in prompt and "Total revenue: 250." in prompt


def test_efficiency_and_measured_usage() -> None:
    assert efficiency({"model_calls": 2, "sandbox_errors": 0}) == 1.0
    assert efficiency({"model_calls": 5, "sandbox_errors": 1}) == pytest.approx(1 - 0.03 - 0.15)
    assert usage_measured(USAGE)
    assert not usage_measured({})
    assert not usage_measured({**USAGE, "input_tokens": 0, "output_tokens": 0})  # the endpoint reported none
    assert not usage_measured({"input_tokens": 5})


def test_missing_usage_earns_no_efficiency_credit(metric: FleetMetric, model_server: ScriptedModelServer) -> None:
    model_server.script(JUDGE, judge_says(True))
    scored = metric(gold(), pred(usage={**USAGE, "input_tokens": 0, "output_tokens": 0}))
    assert scored.score == pytest.approx(0.9)
    assert "usage was not measured" in scored.feedback and "cannot support a promotion" in scored.feedback


def test_an_empty_answer_scores_zero_without_asking_the_judge(
    metric: FleetMetric, model_server: ScriptedModelServer
) -> None:
    for answer in (None, "", "  \n"):
        scored = metric(gold(), pred(answer, error="turn deadline of 60s exceeded"))
        assert scored.score == 0.0
        assert "the answer is empty (the turn ended: turn deadline of 60s exceeded)" in scored.feedback
        assert "The reviewed answer is: The total is 250." in scored.feedback
    assert model_server.model.requests_for(JUDGE) == []


@pytest.mark.parametrize(
    ("expectations", "fields", "said"),
    [
        ({"value": 251}, {}, "no number in the answer equals the expected value 251"),
        ({"value": 251.0, "tolerance": 0.5}, {}, "expected value 251 (±0.5)"),
        ({"value": "north"}, {}, "does not state the expected value 'north'"),
        ({"contains": ["revenue", "EUR"]}, {}, "the answer does not contain 'EUR'"),
        ({"regex": [r"\bEUR\b"]}, {}, "does not match the regex"),
        ({"artifacts": [{"path": "artifacts/t.csv"}]}, {}, "the artifact artifacts/t.csv was not written"),
        (
            {"artifacts": [{"path": "artifacts/t.csv", "contains": ["north"]}]},
            {"artifacts": {"artifacts/t.csv": "south,80"}},
            "artifacts/t.csv does not contain 'north'",
        ),
        ({"route": "flex"}, {}, "the turn took the rlm route; the label requires flex"),
        ({"delegation": True}, {}, "no child agent ran; the label requires delegation"),
        ({"delegation": False}, {"usage": {**USAGE, "children": 2}}, "2 child agent(s) ran; the label requires none"),
        ({}, {"unverified_reason": "extracted when the budget ran out"}, "the answer is unverified (extracted"),
    ],
)
def test_each_failed_check_scores_zero_and_says_what_failed(
    metric: FleetMetric, model_server: ScriptedModelServer, expectations: dict[str, Any], fields: Any, said: str
) -> None:
    scored = metric(gold(**expectations), pred(**fields))
    assert scored.score == 0.0
    assert scored.feedback.startswith("Failed: ") and said in scored.feedback
    assert model_server.model.requests_for(JUDGE) == []  # a failed deterministic check decides


def test_checks_that_hold_pass_to_the_judge(metric: FleetMetric, model_server: ScriptedModelServer) -> None:
    model_server.script(JUDGE, judge_says(True), judge_says(True))
    passing = {
        "value": 250.2,
        "tolerance": 0.5,
        "contains": ["250"],
        "regex": [r"\d+"],
        "artifacts": [{"path": "artifacts/t.txt", "contains": ["250"], "regex": ["^total"]}],
        "route": "rlm",
        "delegation": False,
    }
    assert metric(gold(**passing), pred(artifacts={"artifacts/t.txt": "total=250"})).score == pytest.approx(1.0)
    unverified = metric(gold(allow_unverified=True), pred(unverified_reason="extracted"))
    assert unverified.score == pytest.approx(1.0)  # the label accepts an unverified answer


def test_the_judge_decides_what_the_checks_cannot(metric: FleetMetric, model_server: ScriptedModelServer) -> None:
    model_server.script(JUDGE, judge_says(False, "it says 205, not 250"), Reply(status=500, text="judge down"))
    wrong = metric(gold(), pred("The total is 205."))
    assert wrong.score == 0.0
    assert "the judge found the answer incorrect: it says 205, not 250" in wrong.feedback
    down = metric(gold(), pred())
    assert down.score == 0.0 and "the judge could not grade the answer" in down.feedback


def test_the_judge_defaults_to_the_root_model(model_server: ScriptedModelServer, home: Path) -> None:
    metric = build_fleet_metric(scripted_settings(model_server, home))
    model_server.script("root", judge_says(True))
    assert metric(gold(), pred()).score == pytest.approx(1.0)
    assert len(model_server.model.requests_for("root")) == 1
