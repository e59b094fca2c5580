"""Eval runs: labeled turns replayed concurrently in fresh runtimes and scored with ``fleet_metric``
(scripted task and judge models, real sandboxes, SQLite and PostgreSQL), and ``fleet eval`` as people
run it (a subprocess)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.quality.evaluation import reports_dir, run_eval
from fleet_rlm.quality.labels import label_turn, load_expectations
from fleet_rlm.service.service import FleetService
from fleet_rlm.store import Database
from fleet_rlm.testing.cli import run_fleet, scripted_env
from fleet_rlm.testing.settings import scripted_settings

from .conftest import JUDGE, SALES, TOTAL_CODE, captured_turn, judge_says

pytestmark = pytest.mark.anyio


async def test_an_eval_run_replays_every_label_and_reports_each_score(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    tasks = {"alpha": "Total for alpha?", "beta": "Total for beta?", "gamma": "Total for gamma?"}
    turns = {name: await captured_turn(service, model_server, name, message=task) for name, task in tasks.items()}
    for name, turn in turns.items():
        expectations = load_expectations('{"route": "rlm"}') if name == "beta" else None
        await label_turn(service, turn.id, answer="The total revenue is 250.", value=250, expectations=expectations)
    model_server.script_for_task("root", "alpha", rlm_step("Sum.", TOTAL_CODE))
    model_server.script_for_task("root", "beta", rlm_step("Guess.", "SUBMIT(answer='about 300')"))
    gone = turns["gamma"].session_id
    service.parts.blobs.path(gone, hashlib.sha256(SALES).hexdigest()).unlink()  # gamma cannot be restored
    model_server.script(JUDGE, judge_says(True))
    progress: list[tuple[int, int]] = []
    labels = await service.parts.store.list_labels()
    report = await run_eval(service, labels, on_progress=lambda done, total: progress.append((done, total)))
    rows = {row.group: row for row in report.rows}
    assert [row.turn_id for row in report.rows] == [label.turn_id for label in labels]  # the labels' order
    assert rows["alpha"].score == pytest.approx(1.0) and rows["alpha"].usage_measured
    assert (
        rows["beta"].score == 0.0 and "no number in the answer equals the expected value 250" in rows["beta"].feedback
    )
    assert (
        rows["gamma"].score == 0.0 and "the replay could not run (input file files/sales.csv" in rows["gamma"].feedback
    )
    assert report.mean == pytest.approx(1 / 3)
    assert sorted(progress) == [(1, 3), (2, 3), (3, 3)]
    json_path, md_path = report.write(reports_dir(service.settings, report.run_id))
    data = json.loads(json_path.read_text())
    assert data["examples"] == 3 and data["mean"] == pytest.approx(1 / 3)
    assert data["program"]["version"] == "builtin"
    markdown = md_path.read_text()
    assert f"mean score **{report.mean:.3f}**" in markdown and rows["beta"].turn_id in markdown


async def test_fleet_eval_as_people_run_it(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    settings = scripted_settings(model_server, tmp_path / "home", capture_replays=True, sandbox_pool_size=0)
    service = FleetService(settings, database=Database(f"sqlite+aiosqlite:///{settings.data_dir / 'fleet.db'}"))
    await service.start()
    try:
        turn = await captured_turn(service, model_server, "sales")
    finally:
        await service.stop()
    env = scripted_env(model_server, judge_lm_model=f"openai/{JUDGE}", sandbox_pool_size="0")
    (tmp_path / "expect.json").write_text('{"artifacts": [{"path": "artifacts/total.txt", "contains": ["250"]}]}')
    label = ["eval", "label", turn.id, "--answer", "The total revenue is 250.", "--value", "250", "--critical"]
    labeled = run_fleet([*label, "--expectations-file", "expect.json"], tmp_path, env)
    assert labeled.returncode == 0, labeled.stderr
    assert f"labeled {turn.id} as lbl_" in labeled.stdout and "(group sales)" in labeled.stdout
    again = run_fleet(["eval", "label", turn.id, "--answer", "x"], tmp_path, env)
    assert again.returncode == 1 and "labeled already" in again.stderr
    listed = json.loads(run_fleet(["eval", "ls", "--json"], tmp_path, env).stdout)
    assert [(x["turn_id"], x["value"], x["critical"]) for x in listed] == [(turn.id, 250, True)]

    model_server.script("root", rlm_step("Sum.", TOTAL_CODE))
    model_server.script(JUDGE, judge_says(True))
    ran = run_fleet(["eval", "run", "--session", "sales"], tmp_path, env, timeout=180)
    assert ran.returncode == 0, ran.stderr
    assert "mean score 1.000 over 1 examples" in ran.stdout and "replaying" in ran.stdout
    reports = sorted((tmp_path / "home" / "evals").glob("*/report.json"))
    assert len(reports) == 1 and json.loads(reports[0].read_text())["rows"][0]["score"] == 1.0
    assert (reports[0].parent / "report.md").is_file()

    removed = run_fleet(["eval", "rm", listed[0]["id"]], tmp_path, env)
    assert removed.returncode == 0 and f"removed {listed[0]['id']}" in removed.stdout
    empty = run_fleet(["eval", "run"], tmp_path, env)
    assert empty.returncode == 1 and "no labels to evaluate" in empty.stderr
