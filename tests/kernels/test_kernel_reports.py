"""``fleet doctor`` and the health endpoint report the live kernels and their memory."""

from __future__ import annotations

from pathlib import Path

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.cli import run_fleet
from fleet_rlm.testing.settings import SettingsFactory
from tests.api.server import free_port, server_in_thread

from .conftest import run_turn

GROW = "block = bytearray(64 * 1024 * 1024)\nSUBMIT(answer='ok')"


def test_health_and_doctor_count_live_kernels_and_their_memory(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    with server_in_thread(make_settings()) as api, api.http() as http:
        assert http.get("/health").json()["kernels"] == {"live": 0, "memory_bytes": 0}
        http.post("/sessions", json={"name": "s"})
        model_server.script("root", rlm_step("Grow.", GROW))
        assert run_turn(http, "s", "grow")["answer"] == "ok"
        assert http.get("/sessions/s/kernel").json()["live"]
        kernels = http.get("/health").json()["kernels"]
        assert kernels["live"] == 1 and kernels["memory_bytes"] > 64 * 1024 * 1024  # an idle kernel's memory counts

        # doctor asks the server its settings name (here by port): what runs there is reported.
        result = run_fleet(["doctor"], tmp_path, {"FLEET_SERVER_PORT": str(api.base_url.rsplit(":", 1)[1])})
        text = " ".join(result.stdout.split())
        assert "pass kernels: 1 live on the server at http://127.0.0.1:" in text
        assert " MiB resident; at most 8, idle timeout 900s" in text

    result = run_fleet(["doctor"], tmp_path, {"FLEET_SERVER_PORT": str(free_port())})
    assert "warn  kernels: no Fleet server answers at" in result.stdout


def test_an_idle_kernels_memory_counts_against_its_sandbox_limit_in_the_next_turn(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    with server_in_thread(make_settings(sandbox_memory_mb=320)) as api, api.http() as http:
        http.post("/sessions", json={"name": "s"})
        model_server.script("root", rlm_step("Hold.", "held = bytearray(180 * 1024 * 1024)\nSUBMIT(answer='held')"))
        assert run_turn(http, "s", "hold memory")["answer"] == "held"
        model_server.script(
            "root",
            rlm_step("More.", "more = bytearray(180 * 1024 * 1024)"),
            rlm_step("Report.", "SUBMIT(answer=str('held' in globals()))"),
        )
        turn = run_turn(http, "s", "hold more")
        # The second block does not fit beside the first: the limit is the kernel's, across turns.
        failed = [e for e in turn["events"] if e["type"] in ("execution.failed", "sandbox.restarted")]
        assert failed, [e["type"] for e in turn["events"]]
        if failed[0]["type"] == "execution.failed":
            assert failed[0]["data"]["error_type"] == "MemoryError" and turn["answer"] == "True"
        else:
            assert "memory" in failed[0]["data"]["cause"] and turn["answer"] == "False"
