"""``fleet_metric``: the one score evaluation and optimization share (docs/evaluation.md).

- an empty answer, or any failed applicable quality check, scores 0; the checks are the label's
  deterministic expectations (an unverified answer fails unless the label accepts it; a labeled route
  is a hard requirement), then the judge model's comparison with the reviewed answer;
- otherwise ``efficiency = max(0, 1 − 0.015 × max(0, model_calls − 3) − 0.15 × sandbox_errors)`` and
  ``score = 0.9 + 0.1 × efficiency``;
- missing usage (the endpoint reported no tokens, or no usage at all) earns no efficiency credit; the
  gate also refuses to promote on it (see :func:`usage_measured`).

It returns ``dspy.Prediction(score=..., feedback=...)``, as ``dspy.GEPA`` reads it; the feedback says
in words what failed, and shows the reviewed answer so a reflection model can learn from it.
"""

from __future__ import annotations

from typing import Any

import dspy

from fleet_rlm.config import Settings
from fleet_rlm.engine.budget import one_line
from fleet_rlm.engine.lm import build_lm
from fleet_rlm.quality.expectations import Expectations, check

PASSING_BASE = 0.9


class JudgeAnswer(dspy.Signature):  # type: ignore[misc]
    """Grade a candidate answer against the reviewed answer to the same task. The candidate is correct
    when it states the same result as the reviewed answer: the same figures, names and conclusions.
    Wording, order and format may differ; a missing or different figure makes it incorrect."""

    task: str = dspy.InputField()
    reviewed_answer: str = dspy.InputField(desc="The answer a maintainer approved.")
    candidate_answer: str = dspy.InputField()
    correct: bool = dspy.OutputField()
    reason: str = dspy.OutputField(desc="One sentence: what matches, or what is wrong.")


def usage_measured(usage: dict[str, Any] | None) -> bool:
    """True when the turn's usage was measured: model calls counted and tokens reported."""
    if not usage or not isinstance(usage.get("model_calls"), int) or not isinstance(usage.get("sandbox_errors"), int):
        return False
    return bool(usage.get("input_tokens") or usage.get("output_tokens"))


def efficiency(usage: dict[str, Any]) -> float:
    calls, errors = int(usage["model_calls"]), int(usage["sandbox_errors"])
    return max(0.0, 1 - 0.015 * max(0, calls - 3) - 0.15 * errors)


class FleetMetric:
    """``fleet_metric`` with its judge: callable as a DSPy/GEPA metric ``(gold, pred, trace, pred_name,
    pred_trace)``. ``gold`` has ``task``, ``answer`` (reviewed) and ``expectations`` (a dict); ``pred`` has
    ``answer``, ``route``, ``usage``, ``artifacts`` (path -> text), ``unverified_reason`` and ``error``."""

    def __init__(self, judge_lm: Any) -> None:
        self.judge_lm = judge_lm
        self.judge = dspy.Predict(JudgeAnswer)

    def __call__(
        self, gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None, pred_trace: Any = None
    ) -> dspy.Prediction:
        answer = str(getattr(pred, "answer", None) or "").strip()
        reviewed = f"The reviewed answer is: {gold.answer}"
        if not answer:
            error = getattr(pred, "error", None)
            ended = f" (the turn ended: {error})" if error else ""
            return dspy.Prediction(score=0.0, feedback=f"Failed: the answer is empty{ended}. {reviewed}")
        expectations = Expectations.model_validate(gold.expectations or {})
        failures = check(expectations, pred)
        if not failures:
            verdict = self._judge(str(gold.task), str(gold.answer), answer)
            if verdict is not None:
                failures.append(verdict)
        if failures:
            return dspy.Prediction(score=0.0, feedback="Failed: " + "; ".join(failures) + f". {reviewed}")
        usage = getattr(pred, "usage", None) or {}
        if not usage_measured(usage):
            return dspy.Prediction(
                score=PASSING_BASE,
                feedback="Passed every check, but usage was not measured (no tokens reported), so it earns no "
                "efficiency credit and cannot support a promotion.",
            )
        value = efficiency(usage)
        return dspy.Prediction(
            score=PASSING_BASE + 0.1 * value,
            feedback=f"Passed every check; efficiency {value:.3f} ({usage['model_calls']} model calls, "
            f"{usage['sandbox_errors']} sandbox errors).",
        )

    def _judge(self, task: str, reviewed: str, answer: str) -> str | None:
        """The judge's objection, or None when it finds the answer correct; its failure is a failed check."""
        try:
            with dspy.context(lm=self.judge_lm):
                verdict = self.judge(task=task, reviewed_answer=reviewed, candidate_answer=answer)
        except Exception as exc:
            return f"the judge could not grade the answer ({one_line(exc)})"
        if verdict.correct is True:
            return None
        return f"the judge found the answer incorrect: {verdict.reason}"


def build_fleet_metric(settings: Settings) -> FleetMetric:
    """``fleet_metric`` judged by ``FLEET_JUDGE_LM_*`` (each unset field is the root model's)."""
    return FleetMetric(build_lm(settings.judge_lm.over(settings.lm)))
