"""Approving, listing and rolling back optimized programs (SQLite and PostgreSQL): approval checks the
candidate's bytes and every identity it was measured under; stale evidence asks for re-evaluation;
the approved program serves from the next turn and each turn records the version it ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from fleet_rlm.config import Settings
from fleet_rlm.engine.identity import code_identity, config_identity, dependency_identity
from fleet_rlm.engine.program import FleetTask, ProgramSpec
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.quality.optimize import approve
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.store import Conflict, Database, Invalid, NotFound
from fleet_rlm.store.tables import ProgramRow
from fleet_rlm.testing.cli import run_fleet, scripted_env
from fleet_rlm.testing.settings import SettingsFactory

pytestmark = pytest.mark.anyio

MARK = "Always answer in French."


def passing_report(service: FleetService, program: ProgramSpec, incumbent: str = "builtin") -> dict[str, Any]:
    return {
        "identities": {
            "incumbent": incumbent,
            "config": config_identity(service.settings)["sha256"],
            "code": code_identity(),
            "dependencies": dependency_identity(),
        },
        "candidate": {"sha256": program.sha256, "changed": ["generate_action"], "content": program.content()},
        "gate": {"passed": True, "conditions": [{"name": "dev-improved", "passed": True, "detail": "1.0 vs 0.0"}]},
    }


async def candidate(service: FleetService, text: str = MARK, **report_changes: Any) -> str:
    version = await service.parts.store.next_program_version()
    program = ProgramSpec(version=version, generate_action=f"{FleetTask.instructions}\n\n{text}")
    report = {**passing_report(service, program), **report_changes}
    await service.parts.store.add_program(version, program.canonical_bytes().decode(), program.sha256, report)
    return version


async def run_turn(service: FleetService, model_server: ScriptedModelServer) -> tuple[str | None, str]:
    if "p" not in {s.name for s in await service.sessions.recent()}:
        await service.sessions.create(name="p")
    model_server.script("root", rlm_step("Answer.", "SUBMIT(answer='ok')"))
    turn, _ = await service.turns.submit("p", TurnSubmission(message="hello"))
    done = await service.turns.wait(turn.id)
    return done.program_version, str(model_server.model.requests_for("root")[-1]["messages"])


async def test_approval_serves_from_the_next_turn_and_rollback_restores(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    version, prompt = await run_turn(service, model_server)
    assert version == "builtin" and MARK not in prompt
    first = await candidate(service)
    assert (await run_turn(service, model_server))[0] == "builtin"  # a candidate stays inactive
    await approve(service, first)
    version, prompt = await run_turn(service, model_server)
    assert version == first and MARK in prompt
    second = await candidate(
        service,
        "Answer in one line.",
        identities={**passing_report(service, ProgramSpec())["identities"], "incumbent": first},
    )
    await approve(service, second)
    assert (await run_turn(service, model_server))[0] == second
    assert (await service.parts.store.retire_active_program()).version == second
    assert (await run_turn(service, model_server))[0] == first  # the one approved before serves again
    await service.parts.store.retire_active_program()
    version, prompt = await run_turn(service, model_server)
    assert version == "builtin" and MARK not in prompt
    with pytest.raises(Conflict, match="nothing to roll back"):
        await service.parts.store.retire_active_program()
    assert [(p.version, p.status) for p in await service.parts.store.list_programs()] == [
        (first, "retired"),
        (second, "retired"),
    ]


async def test_approval_refuses_stale_or_altered_evidence(
    service: FleetService, make_settings: SettingsFactory
) -> None:
    with pytest.raises(NotFound, match="no program 'v9'"):
        await approve(service, "v9")
    failed = await candidate(
        service, gate={"passed": False, "conditions": [{"name": "usage-measured", "passed": False, "detail": "x"}]}
    )
    with pytest.raises(Invalid, match="did not pass the gate \\(usage-measured failed\\)"):
        await approve(service, failed)
    stale = {
        "code": ("code", "0" * 64),
        "dependencies": ("dependencies", {"fleet-rlm": "0.0.1", "dspy": "3.4.0"}),
        "configuration": ("config", "f" * 64),
        "serving program": ("incumbent", "v7"),
    }
    for what, (key, value) in stale.items():
        identities = {**passing_report(service, ProgramSpec())["identities"], key: value}
        version = await candidate(service, what, identities=identities)
        with pytest.raises(Conflict, match=f"stale evidence: the {what} changed since the evaluation") as refused:
            await approve(service, version)
        assert (
            refused.value.code == "stale_evidence"
            and "run fleet optimize again to re-evaluate" in refused.value.message
        )
    altered = await candidate(service)
    async with service.parts.database.write() as session:
        await session.execute(
            update(ProgramRow).where(ProgramRow.version == altered).values(content=json.dumps({"extract": "evil"}))
        )
    with pytest.raises(Conflict, match="bytes do not match the sha256 its report recorded") as refused:
        await approve(service, altered)
    assert refused.value.code == "candidate_altered"

    other = FleetService(make_settings(lm_temperature=1.5), database=Database(str(service.settings.database_url)))
    measured = await candidate(service)
    with pytest.raises(Conflict, match="stale evidence: the configuration changed"):
        await approve(other, measured)
    await other.parts.database.dispose()
    assert await service.parts.store.active_program() is None


async def test_an_approval_racing_another_one_is_refused(service: FleetService) -> None:
    first, second = await candidate(service, "one"), await candidate(service, "two")
    await approve(service, first)
    with pytest.raises(Conflict, match=f"program {first} serves now, not builtin"):
        await service.parts.store.approve_program(second, incumbent=None)


def test_fleet_optimize_list_approve_rollback(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    import asyncio

    env = scripted_env(model_server, sandbox_pool_size="0")
    # The settings `fleet` reads from that environment: the candidate is measured under the same ones.
    settings = Settings.model_validate({"home": tmp_path / "home", **{k[6:].lower(): v for k, v in env.items()}})
    url = f"sqlite+aiosqlite:///{settings.data_dir / 'fleet.db'}"

    async def prepare() -> str:
        service = FleetService(settings, database=Database(url))
        await service.start(run_turns=False)
        try:
            return await candidate(service)
        finally:
            await service.stop()

    version = asyncio.run(prepare())
    listed = json.loads(run_fleet(["optimize", "--list", "--json"], tmp_path, env).stdout)
    assert listed["serving"] == "builtin"
    assert [(p["version"], p["status"], p["gate_passed"]) for p in listed["programs"]] == [(version, "candidate", True)]
    approved = run_fleet(["optimize", "--approve", version], tmp_path, env)
    assert approved.returncode == 0, approved.stderr
    assert f"approved {version}: it serves from the next turn" in approved.stdout
    assert json.loads(run_fleet(["optimize", "--list", "--json"], tmp_path, env).stdout)["serving"] == version
    rolled = run_fleet(["optimize", "--rollback"], tmp_path, env)
    assert rolled.returncode == 0 and f"retired {version}; builtin serves from the next turn" in rolled.stdout
    again = run_fleet(["optimize", "--rollback"], tmp_path, env)
    assert again.returncode == 1 and "nothing to roll back" in again.stderr
    both = run_fleet(["optimize", "--list", "--rollback"], tmp_path, env)
    assert both.returncode == 2 and "give one of --approve, --list and --rollback" in both.stderr
    refused = run_fleet(["optimize", "--max-metric-calls", "5"], tmp_path, env)
    assert refused.returncode == 1 and "dataset rule 'min-examples': 0 approved examples" in refused.stderr
