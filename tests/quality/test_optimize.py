"""``fleet optimize`` end to end, offline: native ``dspy.GEPA`` over Fleet's program, with scripted
models for the task, the judge and reflection (real HTTP, real sandboxes, SQLite).

The scripted task model answers correctly only when its instructions hold HINT; the scripted
reflection model proposes HINT only after reading the metric's feedback; the judge accepts an answer
stating 250.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from fleet_rlm.config import Settings
from fleet_rlm.engine.program import FleetTask
from fleet_rlm.models.scripted import Reply, ScriptedModelServer, fields_reply, rlm_step, task_of
from fleet_rlm.quality.labels import label_turn
from fleet_rlm.quality.optimize import approve, optimize
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.store import Conflict, Database, Invalid

from .conftest import JUDGE, TOTAL_CODE, captured_turn, judge_says

pytestmark = pytest.mark.anyio

REFLECTION = "reflection"
HINT = "HINT: sum every revenue row of files/sales.csv; never estimate."
WRONG = "SUBMIT(answer='The total revenue is about 170.')"
FEEDBACK = "no number in the answer equals the expected value 250"
GROUPS = {"alpha": 3, "beta": 3, "crit": 2}  # alpha trains, beta is dev, crit (critical) is the holdout


class Models:
    """The scripted task, judge and reflection models, each answering from what it is asked."""

    def __init__(self, *, critical_breaks: bool = False, tokens: bool = True) -> None:
        self.critical_breaks = critical_breaks
        self.tokens = tokens
        self.reflections: list[str] = []

    def text(self, request: dict[str, Any]) -> str:
        model, prompt = request.get("model"), json.dumps(request.get("messages"))
        if model == JUDGE:
            candidate = prompt.split("candidate_answer ## ]]")[-1]
            return judge_says("250" in candidate, "states 250" if "250" in candidate else "does not state 250")
        if model == REFLECTION:
            self.reflections.append(prompt)
            if "revised_source" in prompt:  # the flex code proposer: keep the module
                source = re.search(r"current_source ## \]\]\\n(.*?)\\n\\n\[\[", prompt)
                return fields_reply(revised_source=json.loads(f'"{source.group(1)}"') if source else "")
            instruction = f"{FleetTask.instructions}\n\n{HINT}" if FEEDBACK in prompt else "Be careful."
            return json.dumps({"new_instruction": instruction})
        hinted = HINT in prompt
        critical = "critical" in (task_of(request) or "")
        correct = hinted != (critical and self.critical_breaks) if critical else hinted
        return rlm_step("Total.", TOTAL_CODE if correct else WRONG)

    def reply(self, request: dict[str, Any]) -> Reply:
        return Reply(
            text=self.text(request), prompt_tokens=10 if self.tokens else 0, completion_tokens=5 if self.tokens else 0
        )


@pytest.fixture
async def fleet(model_server: ScriptedModelServer, home: Path) -> AsyncIterator[Callable[..., Any]]:
    from fleet_rlm.testing.settings import scripted_settings

    services: list[FleetService] = []

    async def make(**overrides: Any) -> FleetService:
        values: dict[str, Any] = {
            "database_url": f"sqlite+aiosqlite:///{home / 'fleet.db'}",
            "sandbox_pool_size": 1,
            "judge_lm_model": f"openai/{JUDGE}",
            "reflection_lm_model": f"openai/{REFLECTION}",
            "capture_replays": True,
        }
        values.update(overrides)
        settings: Settings = scripted_settings(model_server, home, **values)
        service = FleetService(settings, database=Database(str(settings.database_url)))
        await service.start()
        services.append(service)
        return service

    yield make
    for service in services:
        await service.stop()


async def labeled_dataset(service: FleetService, model_server: ScriptedModelServer) -> None:
    for group, count in GROUPS.items():
        for index in range(count):
            task = f"What is the total revenue? ({'critical ' if group == 'crit' else ''}case {group}-{index})"
            turn = await captured_turn(service, model_server, group, message=task, code=WRONG)
            await label_turn(service, turn.id, answer="The total revenue is 250.", value=250, critical=group == "crit")


def use(model_server: ScriptedModelServer, models: Models) -> None:
    model_server.model.default = models.reply


def conditions(report: dict[str, Any]) -> dict[str, bool]:
    return {c["name"]: c["passed"] for c in report["gate"]["conditions"]}


async def test_gepa_finds_the_hint_the_gate_passes_and_approval_serves_it(
    fleet: Callable[..., Any], model_server: ScriptedModelServer
) -> None:
    service: FleetService = await fleet()
    models = Models()
    use(model_server, models)
    await labeled_dataset(service, model_server)
    run = await optimize(service, max_metric_calls=12)
    report = run.program.report
    assert run.program.status == "candidate" and run.program.version == "v1"
    assert report["dataset"]["groups"] == {"train": ["alpha"], "dev": ["beta"], "holdout": ["crit"]}
    assert any(FEEDBACK in prompt for prompt in models.reflections)  # reflection read the metric's feedback
    assert HINT in report["candidate"]["content"]["generate_action"]
    assert conditions(report) == dict.fromkeys(conditions(report), True), report["gate"]
    assert report["validation"]["baseline"]["dev_mean"] == 0.0
    assert report["validation"]["candidate"]["dev_mean"] == pytest.approx(1.0)
    markdown = run.markdown_report.read_text()
    assert "gate PASSED" in markdown and "| critical-holdout-passes | pass |" in markdown
    assert json.loads(run.json_report.read_text())["candidate"]["sha256"] == run.program.sha256

    before, _ = await service.turns.submit("alpha", TurnSubmission(message="Total, please?"))
    assert (await service.turns.wait(before.id)).program_version == "builtin"  # inactive until approved

    approved = await approve(service, "v1")
    assert approved.status == "approved"
    turn, _ = await service.turns.submit("alpha", TurnSubmission(message="Total now?"))
    done = await service.turns.wait(turn.id)
    assert done.status == "completed" and done.answer == "The total revenue is 250."
    assert done.program_version == "v1"
    with pytest.raises(Conflict, match="is approved, not a candidate"):
        await approve(service, "v1")


async def test_a_candidate_that_breaks_a_critical_holdout_case_fails_the_gate(
    fleet: Callable[..., Any], model_server: ScriptedModelServer
) -> None:
    service: FleetService = await fleet()
    use(model_server, Models(critical_breaks=True))
    await labeled_dataset(service, model_server)
    run = await optimize(service, max_metric_calls=12)
    passed = conditions(run.program.report)
    assert not run.passed
    assert passed["dev-improved"] and passed["program-changed"] and passed["usage-measured"]
    assert not passed["critical-holdout-passes"] and not passed["no-quality-regression"]
    detail = next(
        c["detail"] for c in run.program.report["gate"]["conditions"] if c["name"] == "critical-holdout-passes"
    )
    assert "critical holdout case(s) failed in at least one pass" in detail
    assert "| critical-holdout-passes | FAIL |" in run.markdown_report.read_text()
    with pytest.raises(
        Invalid, match=r"did not pass the gate \(no-quality-regression, critical-holdout-passes failed\)"
    ):
        await approve(service, run.program.version)
    assert (await service.parts.store.active_program()) is None


async def test_missing_usage_is_not_promotable(fleet: Callable[..., Any], model_server: ScriptedModelServer) -> None:
    service: FleetService = await fleet()
    use(model_server, Models(tokens=False))
    await labeled_dataset(service, model_server)
    run = await optimize(service, max_metric_calls=12)
    passed = conditions(run.program.report)
    assert passed["dev-improved"] and passed["critical-holdout-passes"]
    assert not passed["usage-measured"] and not run.passed
    with pytest.raises(Invalid, match="usage-measured failed"):
        await approve(service, run.program.version)
