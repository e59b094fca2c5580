"""Validation passes and the promotion gate of an optimization run.

After the search, the baseline (the program serving now) and the candidate each replay dev plus holdout
``VALIDATION_PASSES`` times, with response caches off (Fleet's models never cache). The gate passes only
when every condition holds:

1. ``dev-improved``: the candidate's mean dev score is above the baseline's;
2. ``no-quality-regression``: the candidate passes (scores above 0) no fewer holdout cases, and no
   fewer cases overall, than the baseline, pass for pass on average;
3. ``usage-measured``: every validation replay of both programs measured its usage;
4. ``no-holdout-errors``: no candidate holdout replay failed or ended in error;
5. ``critical-holdout-passes``: there is a critical holdout case, and every one passes in every pass;
6. ``program-changed``: the candidate changes instructions or code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleet_rlm.quality.evaluation import EvalRow

VALIDATION_PASSES = 3


@dataclass
class Validation:
    """One program's validation replays: ``rows[pass][split]``."""

    passes: list[dict[str, list[EvalRow]]] = field(default_factory=list)

    def rows(self, split: str | None = None) -> list[EvalRow]:
        return [row for run in self.passes for name, rows in run.items() if split in (None, name) for row in rows]

    def mean(self, split: str | None = None) -> float:
        rows = self.rows(split)
        return sum(r.score for r in rows) / len(rows) if rows else 0.0

    def pass_rate(self, split: str | None = None) -> float:
        rows = self.rows(split)
        return sum(1 for r in rows if r.score > 0) / len(rows) if rows else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "dev_mean": round(self.mean("dev"), 6),
            "holdout_mean": round(self.mean("holdout"), 6),
            "dev_pass_rate": round(self.pass_rate("dev"), 6),
            "holdout_pass_rate": round(self.pass_rate("holdout"), 6),
            "aggregate_pass_rate": round(self.pass_rate(), 6),
            "passes": [
                {split: [{"turn_id": r.turn_id, "score": r.score, "feedback": r.feedback} for r in rows]}
                for run in self.passes
                for split, rows in run.items()
            ],
        }


@dataclass(frozen=True)
class Condition:
    name: str
    passed: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


def gate(baseline: Validation, candidate: Validation, changed: list[str]) -> list[Condition]:
    base_dev, cand_dev = baseline.mean("dev"), candidate.mean("dev")
    base_hold, cand_hold = baseline.pass_rate("holdout"), candidate.pass_rate("holdout")
    base_all, cand_all = baseline.pass_rate(), candidate.pass_rate()
    unmeasured = [r for v in (baseline, candidate) for r in v.rows() if not r.usage_measured]
    holdout_errors = [r for r in candidate.rows("holdout") if r.status != "completed" or r.error]
    critical = [r for r in candidate.rows("holdout") if r.critical]
    critical_failed = sorted({r.turn_id for r in critical if r.score <= 0})
    passes = len(candidate.passes)
    return [
        Condition(
            "dev-improved",
            cand_dev > base_dev,
            f"mean dev score {cand_dev:.4f} (candidate) vs {base_dev:.4f} (baseline) over {passes} passes",
        ),
        Condition(
            "no-quality-regression",
            cand_hold >= base_hold and cand_all >= base_all,
            f"holdout pass rate {cand_hold:.3f} vs {base_hold:.3f}; dev+holdout pass rate {cand_all:.3f} vs "
            f"{base_all:.3f} (candidate vs baseline)",
        ),
        Condition(
            "usage-measured",
            not unmeasured,
            "every validation replay measured its usage"
            if not unmeasured
            else f"{len(unmeasured)} validation replay(s) had no measured usage (the endpoint reported no tokens), "
            "so efficiency is unknown and the result cannot support a promotion",
        ),
        Condition(
            "no-holdout-errors",
            not holdout_errors,
            "no candidate holdout replay failed"
            if not holdout_errors
            else f"{len(holdout_errors)} candidate holdout replay(s) failed: "
            + "; ".join(sorted({f"{r.turn_id}: {r.error or r.status}" for r in holdout_errors})),
        ),
        Condition(
            "critical-holdout-passes",
            bool(critical) and not critical_failed,
            "no critical holdout case: a dataset without one cannot produce an approvable candidate"
            if not critical
            else f"every critical holdout case passed in all {passes} passes"
            if not critical_failed
            else f"critical holdout case(s) failed in at least one pass: {', '.join(critical_failed)}",
        ),
        Condition(
            "program-changed",
            bool(changed),
            f"changed: {', '.join(changed)}" if changed else "the search changed no instruction or code",
        ),
    ]
