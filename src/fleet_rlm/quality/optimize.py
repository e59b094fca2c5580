"""``fleet optimize``: search with ``dspy.GEPA``, validate, gate, save an inactive candidate; approve,
list and roll back (docs/evaluation.md).

The search runs GEPA's own loop over :class:`fleet_rlm.quality.student.FleetStudent` (train for
reflection, dev for its Pareto tracking), its reflection model set with ``FLEET_REFLECTION_LM_*``.
Then :mod:`fleet_rlm.quality.gate` validates and judges. The candidate is saved with its report and
stays inactive; approving it later checks that its bytes and every identity it was measured under
(incumbent program, configuration, Fleet's code, dependencies) still hold.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import dspy

from fleet_rlm.config import Settings
from fleet_rlm.engine.identity import code_identity, config_identity, dependency_identity
from fleet_rlm.engine.lm import build_lm
from fleet_rlm.engine.modes.flex import FLEX_MODULE
from fleet_rlm.engine.program import FleetTask, ProgramSpec
from fleet_rlm.protocol.ids import BUILTIN_PROGRAM_VERSION
from fleet_rlm.quality.dataset import Split, split_dataset
from fleet_rlm.quality.evaluation import EvalRow, example_of, score_label
from fleet_rlm.quality.gate import VALIDATION_PASSES, Condition, Validation, gate
from fleet_rlm.quality.metric import FleetMetric, build_fleet_metric
from fleet_rlm.quality.student import FleetStudent, Replayer, builtin_extract_instructions, changed_parts
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.programs import program_of
from fleet_rlm.store import Conflict, Invalid, LabelRecord, ProgramRecord

GEPA_BUDGETS = ("light", "medium", "heavy")


@dataclass(frozen=True)
class Optimization:
    """What a run produced: the saved (inactive) candidate and its report files."""

    program: ProgramRecord
    json_report: Path
    markdown_report: Path

    @property
    def passed(self) -> bool:
        return bool(self.program.report["gate"]["passed"])


def check_budget(gepa_budget: str | None, max_metric_calls: int | None) -> dict[str, Any]:
    if (gepa_budget is None) == (max_metric_calls is None):
        raise Invalid("give exactly one of --gepa-budget and --max-metric-calls", code="invalid_budget")
    if gepa_budget is not None and gepa_budget not in GEPA_BUDGETS:
        raise Invalid(f"--gepa-budget {gepa_budget!r}: use one of {', '.join(GEPA_BUDGETS)}", code="invalid_budget")
    if max_metric_calls is not None and max_metric_calls < 1:
        raise Invalid("--max-metric-calls must be at least 1", code="invalid_budget")
    return {"auto": gepa_budget} if gepa_budget else {"max_metric_calls": max_metric_calls}


def normalized(program: ProgramSpec) -> ProgramSpec:
    """``program`` with every part equal to the built-in one left out (None), so it holds only changes."""
    builtin = {
        "generate_action": str(FleetTask.instructions),
        "extract": builtin_extract_instructions(),
        "flex_module_src": FLEX_MODULE,
    }
    parts = {k: (None if v == builtin[k] else v) for k, v in program.content().items()}
    return ProgramSpec(version=program.version, **parts)


async def optimize(
    service: FleetService,
    *,
    session: str | None = None,
    gepa_budget: str | None = None,
    max_metric_calls: int | None = None,
    metric: FleetMetric | None = None,
) -> Optimization:
    """One optimization run; raises Invalid (a dataset rule, a bad budget) before any model call."""
    budget = check_budget(gepa_budget, max_metric_calls)
    settings = service.settings
    session_id = (await service.sessions.get(session)).id if session else None
    split = split_dataset(await service.quality.labels(session_id=session_id))
    labels = [*split.train, *split.dev, *split.holdout]
    snapshots = {x.turn_id: await service.quality.snapshot(x.turn_id) for x in labels}
    metric = metric or build_fleet_metric(settings)
    baseline = await service.quality.serving()
    student = FleetStudent(Replayer(service, asyncio.get_running_loop(), snapshots), baseline)
    search = dspy.GEPA(
        metric=metric,
        reflection_lm=build_lm(settings.reflection_lm.over(settings.lm)),
        num_threads=settings.quality.eval_concurrency,
        use_merge=False,
        seed=0,
        **budget,
    )
    train = [example_of(x, snapshots[x.turn_id]).with_inputs("task", "turn_id") for x in split.train]
    dev = [example_of(x, snapshots[x.turn_id]).with_inputs("task", "turn_id") for x in split.dev]
    found = await asyncio.to_thread(search.compile, student, trainset=train, valset=dev)
    version = await service.quality.next_program_version()
    candidate = normalized(cast(FleetStudent, found).program(version))
    changed = changed_parts(baseline, candidate)
    validations = await _validate(service, split, {"baseline": baseline, "candidate": candidate}, metric)
    conditions = gate(validations["baseline"], validations["candidate"], changed)
    report = _report(
        version, settings, split, baseline, candidate, changed, validations, conditions, budget, session_id
    )
    content = candidate.canonical_bytes().decode()
    record = await service.quality.add_program(version, content, candidate.sha256, report)
    json_path, md_path = write_report(report, reports_dir(settings, version))
    return Optimization(record, json_path, md_path)


async def _validate(
    service: FleetService, split: Split, programs: dict[str, ProgramSpec], metric: FleetMetric
) -> dict[str, Validation]:
    """Every program replays dev and holdout ``VALIDATION_PASSES`` times, concurrently within the limit."""
    slots = asyncio.Semaphore(service.settings.quality.eval_concurrency)

    async def one(label: LabelRecord, program: ProgramSpec) -> EvalRow:
        async with slots:
            return await score_label(service, label, metric, program=program)

    results: dict[str, Validation] = {}
    for name, program in programs.items():
        validation = Validation()
        for _ in range(VALIDATION_PASSES):
            run: dict[str, list[EvalRow]] = {}
            for part, labels in (("dev", split.dev), ("holdout", split.holdout)):
                run[part] = list(await asyncio.gather(*(one(x, program) for x in labels)))
            validation.passes.append(run)
        results[name] = validation
    return results


def _report(
    version: str,
    settings: Settings,
    split: Split,
    baseline: ProgramSpec,
    candidate: ProgramSpec,
    changed: list[str],
    validations: dict[str, Validation],
    conditions: list[Condition],
    budget: dict[str, Any],
    session_id: str | None,
) -> dict[str, Any]:
    return {
        "version": version,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "session_id": session_id,
        "budget": {"gepa_budget": budget.get("auto"), "max_metric_calls": budget.get("max_metric_calls")},
        "dataset": {
            **{part: [x.turn_id for x in labels] for part, labels in split.parts().items()},
            "groups": split.groups(),
            "benchmark_excluded": split.benchmark_excluded,
        },
        "identities": {
            "incumbent": baseline.version,
            "incumbent_sha256": baseline.sha256,
            "config": config_identity(settings)["sha256"],
            "code": code_identity(),
            "dependencies": dependency_identity(),
        },
        "candidate": {"sha256": candidate.sha256, "changed": changed, "content": candidate.content()},
        "validation": {name: v.summary() for name, v in validations.items()},
        "gate": {"passed": all(c.passed for c in conditions), "conditions": [c.as_dict() for c in conditions]},
    }


def reports_dir(settings: Settings, version: str) -> Path:
    return settings.data_dir / "optimizations" / version


def report_markdown(report: dict[str, Any]) -> str:
    gate_report = report["gate"]
    verdict = "PASSED" if gate_report["passed"] else "FAILED"
    lines = [
        f"# Optimization {report['version']}: gate {verdict}",
        "",
        f"Incumbent: `{report['identities']['incumbent']}`. Changed: {', '.join(report['candidate']['changed']) or 'nothing'}.",
        f"Candidate sha256 `{report['candidate']['sha256']}`; it stays inactive until approved.",
        "",
        "| condition | result | numbers |",
        "|---|---|---|",
    ]
    for condition in gate_report["conditions"]:
        result = "pass" if condition["passed"] else "FAIL"
        lines.append(f"| {condition['name']} | {result} | {condition['detail'].replace('|', '/')} |")
    lines += [
        "",
        "| program | dev mean | holdout mean | holdout pass rate | dev+holdout pass rate |",
        "|---|---|---|---|---|",
    ]
    for name, summary in report["validation"].items():
        lines.append(
            f"| {name} | {summary['dev_mean']:.4f} | {summary['holdout_mean']:.4f} | "
            f"{summary['holdout_pass_rate']:.3f} | {summary['aggregate_pass_rate']:.3f} |"
        )
    dataset = report["dataset"]
    lines += [
        "",
        f"Groups: train {dataset['groups']['train']}, dev {dataset['groups']['dev']}, holdout "
        f"{dataset['groups']['holdout']}; {dataset['benchmark_excluded']} benchmark example(s) excluded.",
    ]
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path = directory / "report.json", directory / "report.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(report_markdown(report), encoding="utf-8")
    return json_path, md_path


def _stale(what: str, was: Any, now: Any) -> Conflict:
    return Conflict(
        f"stale evidence: the {what} changed since the evaluation (was {was}, now {now}); run fleet optimize "
        "again to re-evaluate",
        code="stale_evidence",
    )


async def approve(service: FleetService, version: str) -> ProgramRecord:
    """Serve candidate ``version`` from the next turn, once its bytes and identities check out."""
    record = await service.quality.program(version)
    report = record.report
    if record.status != "candidate":
        raise Conflict(f"program {version} is {record.status}, not a candidate", code="program_not_candidate")
    program = program_of(record)
    if program.sha256 != record.sha256 or record.sha256 != report.get("candidate", {}).get("sha256"):
        raise Conflict(
            f"program {version}'s bytes do not match the sha256 its report recorded; it cannot be approved",
            code="candidate_altered",
        )
    failed = [c["name"] for c in report["gate"]["conditions"] if not c["passed"]]
    if not report["gate"]["passed"] or failed:
        raise Invalid(f"program {version} did not pass the gate ({', '.join(failed)} failed)", code="gate_failed")
    identities = report["identities"]
    current = {
        "configuration": (identities["config"], config_identity(service.settings)["sha256"]),
        "code": (identities["code"], code_identity()),
        "dependencies": (identities["dependencies"], dependency_identity()),
    }
    for what, (was, now) in current.items():
        if was != now:
            raise _stale(what, was, now)
    serving = await service.quality.serving()
    if serving.version != identities["incumbent"]:
        raise _stale("serving program", identities["incumbent"], serving.version)
    incumbent = None if identities["incumbent"] == BUILTIN_PROGRAM_VERSION else identities["incumbent"]
    return await service.quality.approve_program(version, incumbent=incumbent)
