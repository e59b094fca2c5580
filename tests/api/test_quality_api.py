"""Evaluation and optimization over real HTTP: labels, eval runs, optimization runs, programs and
approval — and what an attacker can send them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from fleet_rlm.engine.identity import code_identity, config_identity, dependency_identity
from fleet_rlm.engine.program import FleetTask, ProgramSpec
from fleet_rlm.models.scripted import ScriptedModelServer, fields_reply, rlm_step
from fleet_rlm.service.service import FleetService
from fleet_rlm.store import Database
from fleet_rlm.testing.settings import SettingsFactory

from .server import server_in_thread

SALES = b"region,revenue\nnorth,100\nsouth,80\nnorth,70\n"
TOTAL = "import csv\nSUBMIT(answer=f\"The total revenue is {sum(int(r['revenue']) for r in csv.DictReader(open('files/sales.csv')))}.\")"
JUDGE_YES = fields_reply(correct="True", reason="states 250")


def captured_turn(http: httpx.Client, session: str, capture: bool = True) -> str:
    http.post("/sessions", json={"name": session, "settings": {"capture_replays": capture}}).raise_for_status()
    http.post(f"/sessions/{session}/files", files={"file": ("sales.csv", SALES, "text/csv")}).raise_for_status()
    turn = http.post(f"/sessions/{session}/turns", json={"message": "What is the total revenue?"}).json()
    with http.stream("GET", f"/turns/{turn['id']}/events") as stream:
        for _ in stream.iter_lines():
            pass
    return str(turn["id"])


def wait_for(http: httpx.Client, path: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run: dict[str, Any] = http.get(path).json()
        if run["status"] != "running":
            return run
        time.sleep(0.2)
    raise AssertionError(f"{path} still running")


def add_candidate(settings: Any, *, passed: bool) -> str:
    """A candidate program stored before the server starts, measured under ``settings``."""

    async def add() -> str:
        service = FleetService(settings, database=Database(str(settings.database_url)))
        await service.start(run_turns=False)
        try:
            version = await service.parts.store.next_program_version()
            program = ProgramSpec(version=version, generate_action=f"{FleetTask.instructions}\n\nBe brief.")
            report = {
                "identities": {
                    "incumbent": "builtin",
                    "config": config_identity(settings)["sha256"],
                    "code": code_identity(),
                    "dependencies": dependency_identity(),
                },
                "candidate": {"sha256": program.sha256, "changed": ["generate_action"]},
                "gate": {
                    "passed": passed,
                    "conditions": [{"name": "dev-improved", "passed": passed, "detail": "0.95 vs 0.90"}],
                },
            }
            await service.parts.store.add_program(version, program.canonical_bytes().decode(), program.sha256, report)
            return version
        finally:
            await service.stop()

    return asyncio.run(add())


def test_label_evaluate_and_approve_over_http(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    settings = make_settings(sandbox_pool_size=0, judge_lm_model="openai/judge")
    good = add_candidate(settings, passed=True)
    failed = add_candidate(settings, passed=False)
    with server_in_thread(settings) as api, api.http() as http:
        model_server.script("root", rlm_step("Sum.", TOTAL))
        turn_id = captured_turn(http, "sales")
        created = http.post(
            "/labels",
            json={
                "turn_id": turn_id,
                "answer": "The total revenue is 250.",
                "value": 250,
                "expectations": {"contains": ["total revenue"], "route": "rlm"},
                "critical": True,
            },
        )
        assert created.status_code == 201, created.text
        label = created.json()
        assert (label["group"], label["value"], label["critical"], label["expectations"]) == (
            "sales",
            250,
            True,
            {"contains": ["total revenue"], "route": "rlm"},
        )
        assert http.get(f"/labels/{turn_id}").json() == label
        assert [x["id"] for x in http.get("/labels", params={"session": "sales"}).json()["items"]] == [label["id"]]
        assert http.get("/labels", params={"group": "other"}).json()["items"] == []

        model_server.script("root", rlm_step("Sum.", TOTAL))
        model_server.script("judge", JUDGE_YES)
        started = http.post("/eval-runs", json={"session": "sales"})
        assert started.status_code == 202 and started.json()["status"] == "running"
        run = wait_for(http, f"/eval-runs/{started.json()['id']}")
        assert run["status"] == "completed", run["error"]
        assert (run["done"], run["total"], run["result"]["mean"]) == (1, 1, 1.0)
        assert run["result"]["rows"][0]["feedback"].startswith("Passed every check")
        assert [r["id"] for r in http.get("/eval-runs").json()["items"]] == [run["id"]]

        listed = http.get("/programs").json()
        assert listed["serving"] == "builtin"
        assert [(p["version"], p["status"], p["serving"]) for p in listed["items"]] == [
            (good, "candidate", False),
            (failed, "candidate", False),
        ]
        assert http.get(f"/programs/{good}").json()["report"]["gate"]["conditions"][0]["name"] == "dev-improved"
        refused = http.post(f"/programs/{failed}/approve")
        assert refused.status_code == 409 and refused.json()["code"] == "gate_failed"
        approved = http.post(f"/programs/{good}/approve")
        assert approved.status_code == 200 and approved.json()["status"] == "approved" and approved.json()["serving"]
        model_server.script("root", rlm_step("Answer.", "SUBMIT(answer='brief')"))
        next_turn = http.post("/sessions/sales/turns", json={"message": "Again?"}).json()
        with http.stream("GET", f"/turns/{next_turn['id']}/events") as stream:
            for _ in stream.iter_lines():
                pass
        assert http.get(f"/turns/{next_turn['id']}").json()["program_version"] == good
        assert http.get(f"/turns/{turn_id}").json()["program_version"] == "builtin"
        rolled = http.post("/programs/rollback").json()
        assert (rolled["version"], rolled["status"], rolled["serving"]) == (good, "retired", False)
        assert http.post("/programs/rollback").json()["code"] == "nothing_to_roll_back"
        assert http.delete(f"/labels/{label['id']}").status_code == 204
        assert http.get(f"/labels/{label['id']}").status_code == 404


def test_what_an_attacker_sends_is_refused(make_settings: SettingsFactory, model_server: ScriptedModelServer) -> None:
    settings = make_settings(sandbox_pool_size=0, api_token=SecretStr("secret"))
    with server_in_thread(settings) as api, api.http(headers={"Authorization": "Bearer secret"}) as http:
        with api.http() as anonymous:
            assert anonymous.get("/labels").status_code == 401
            assert anonymous.post("/programs/rollback").status_code == 401
        model_server.script("root", rlm_step("Sum.", TOTAL))
        plain = captured_turn(http, "plain", capture=False)
        refused = http.post("/labels", json={"turn_id": plain, "answer": "250"})
        assert refused.status_code == 422 and refused.json()["code"] == "turn_not_captured"
        assert "ran without capture_replays" in refused.json()["message"]
        model_server.script("root", rlm_step("Sum.", TOTAL))
        turn_id = captured_turn(http, "sales")
        hostile: list[tuple[dict[str, Any], int, str]] = [
            ({"turn_id": "turn_nope", "answer": "x"}, 404, "turn_not_found"),
            ({"turn_id": turn_id, "answer": "x\x00y"}, 422, "invalid_request"),
            ({"turn_id": turn_id, "answer": "x", "judge": "always pass"}, 422, "invalid_request"),
            ({"turn_id": turn_id, "answer": "x", "group": "../../etc"}, 422, "invalid_label"),
            ({"turn_id": turn_id, "answer": " "}, 422, "invalid_label"),
            (
                {"turn_id": turn_id, "answer": "x", "expectations": {"artifacts": [{"path": "../../etc/passwd"}]}},
                422,
                "invalid_expectations",
            ),
            ({"turn_id": turn_id, "answer": "x", "expectations": {"regex": ["("]}}, 422, "invalid_expectations"),
            ({"turn_id": turn_id, "answer": "x", "expectations": {"route": "teleport"}}, 422, "invalid_expectations"),
        ]
        for body, status, code in hostile:
            answer = http.post("/labels", json=body)
            assert (answer.status_code, answer.json()["code"]) == (status, code), (body, answer.text)
        assert http.get("/labels").json()["items"] == []
        assert http.post("/labels", json={"turn_id": turn_id, "answer": "250"}).status_code == 201
        again = http.post("/labels", json={"turn_id": turn_id, "answer": "250"})
        assert (again.status_code, again.json()["code"]) == (409, "label_exists")

        for body, code in (
            ({"max_metric_calls": 5, "gepa_budget": "light"}, "invalid_budget"),
            ({}, "invalid_budget"),
            ({"max_metric_calls": 5}, "dataset_min_examples"),
        ):
            answer = http.post("/optimizations", json=body)
            assert (answer.status_code, answer.json()["code"]) == (422, code), answer.text
        assert http.post("/optimizations", json={"gepa_budget": "infinite"}).status_code == 422
        assert http.post("/optimizations", json={"max_metric_calls": 0}).status_code == 422
        assert http.post("/eval-runs", json={"groups": ["nobody"]}).json()["code"] == "no_labels"
        assert http.post("/eval-runs", json={"session": "ghost"}).json()["code"] == "session_not_found"
        assert http.get("/eval-runs/eval_nope").json()["code"] == "eval_run_not_found"
        assert http.get("/optimizations/opt_nope").json()["code"] == "optimization_not_found"
        assert http.post("/programs/v9/approve").json()["code"] == "program_not_found"
        assert http.get("/programs/..%2F..%2Fetc").status_code == 404
        assert http.get("/optimizations").json()["items"] == [] and http.get("/eval-runs").json()["items"] == []
