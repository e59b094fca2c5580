"""``fleet eval run``: replay labeled turns concurrently, score each with ``fleet_metric``, and report.

Each labeled turn runs again in its own fresh runtime (:mod:`fleet_rlm.quality.replay`), at most
``quality.eval_concurrency`` at once. The report (JSON and Markdown) lists every example's score and
feedback and the mean; a replay that could not run scores 0 and says why.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dspy

from fleet_rlm.config import Settings
from fleet_rlm.engine.budget import one_line
from fleet_rlm.engine.identity import program_identity
from fleet_rlm.engine.program import ProgramSpec
from fleet_rlm.protocol.events import new_id
from fleet_rlm.quality.labels import expectations_of
from fleet_rlm.quality.metric import FleetMetric, build_fleet_metric, usage_measured
from fleet_rlm.quality.replay import ReplayResult, ReplayUnavailable, replay
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.replays import ReplaySnapshot
from fleet_rlm.store import LabelRecord

Progress = Callable[[int, int], None]
"""Called with (done, total) as replays finish."""


@dataclass
class EvalRow:
    label_id: str
    turn_id: str
    group: str
    critical: bool
    score: float
    feedback: str
    status: str
    route: str | None = None
    answer: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    usage_measured: bool = False
    error: str | None = None


@dataclass
class EvalReport:
    run_id: str
    created_at: str
    rows: list[EvalRow]
    program: dict[str, str] = field(default_factory=dict)

    @property
    def mean(self) -> float:
        return sum(r.score for r in self.rows) / len(self.rows) if self.rows else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "created_at": self.created_at,
            "program": self.program,
            "examples": len(self.rows),
            "mean": round(self.mean, 6),
            "rows": [asdict(row) for row in self.rows],
        }

    def to_markdown(self) -> str:
        lines = [
            f"# Eval run {self.run_id}",
            "",
            f"{len(self.rows)} examples, mean score **{self.mean:.3f}** ({self.created_at}).",
            "",
            "| turn | group | critical | score | feedback |",
            "|---|---|---|---|---|",
        ]
        for row in self.rows:
            feedback = row.feedback.replace("|", "\\|").replace("\n", " ")
            lines.append(
                f"| {row.turn_id} | {row.group} | {'yes' if row.critical else ''} | {row.score:.3f} | {feedback} |"
            )
        return "\n".join(lines) + "\n"

    def write(self, directory: Path) -> tuple[Path, Path]:
        """Write ``report.json`` and ``report.md`` under ``directory``; returns their paths."""
        directory.mkdir(parents=True, exist_ok=True)
        json_path, md_path = directory / "report.json", directory / "report.md"
        json_path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        md_path.write_text(self.to_markdown(), encoding="utf-8")
        return json_path, md_path


def example_of(label: LabelRecord, snapshot: ReplaySnapshot) -> dspy.Example:
    """The DSPy example of a label: its task, reviewed answer and expectations."""
    return dspy.Example(
        task=snapshot.task,
        answer=label.answer,
        expectations=expectations_of(label).model_dump(mode="json"),
        turn_id=label.turn_id,
    ).with_inputs("task")


async def score_label(
    service: FleetService,
    label: LabelRecord,
    metric: FleetMetric,
    settings: Settings | None = None,
    *,
    program: ProgramSpec | None = None,
) -> EvalRow:
    """Replay one labeled turn (with ``program``, the serving one by default) and score it."""
    snapshot = await service.quality.snapshot(label.turn_id)
    row = EvalRow(label.id, label.turn_id, label.group, label.critical, 0.0, "", "failed")
    try:
        result = await replay(service, snapshot, settings=settings, program=program)
    except Exception as exc:
        row.error = one_line(exc, with_type=not isinstance(exc, ReplayUnavailable))
        row.feedback = f"Failed: the replay could not run ({row.error})."
        return row
    scored = await asyncio.to_thread(metric, example_of(label, snapshot), _prediction(result))
    row.score, row.feedback = float(scored.score), str(scored.feedback)
    row.status, row.route, row.answer = result.outcome.status.value, result.route, result.answer
    row.usage, row.usage_measured, row.error = dict(result.usage), usage_measured(result.usage), result.outcome.error
    return row


def _prediction(result: ReplayResult) -> dspy.Prediction:
    return dspy.Prediction(
        answer=result.answer,
        route=result.route,
        usage=result.usage,
        artifacts=result.artifacts,
        unverified_reason=result.unverified_reason,
        error=result.outcome.error,
    )


async def run_eval(
    service: FleetService,
    labels: list[LabelRecord],
    *,
    settings: Settings | None = None,
    metric: FleetMetric | None = None,
    on_progress: Progress | None = None,
) -> EvalReport:
    """Replay and score ``labels`` concurrently; rows come back in the labels' order."""
    base = settings or service.settings
    metric = metric or build_fleet_metric(base)
    slots = asyncio.Semaphore(base.quality.eval_concurrency)
    done = 0

    async def one(label: LabelRecord) -> EvalRow:
        nonlocal done
        async with slots:
            row = await score_label(service, label, metric, settings)
        done += 1
        if on_progress is not None:
            on_progress(done, len(labels))
        return row

    rows = await asyncio.gather(*(one(label) for label in labels))
    return EvalReport(
        run_id=new_id("eval"),
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        rows=list(rows),
        program=program_identity(await service.quality.serving()),
    )


def reports_dir(settings: Settings, run_id: str) -> Path:
    return settings.data_dir / "evals" / run_id
