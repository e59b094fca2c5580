from __future__ import annotations

import os
from pathlib import Path

from fleet_rlm.models.scripted import ScriptedModel, ScriptedModelServer

from .test_cli_run import fleet


def test_doctor_smoke_runs_a_full_turn_without_a_model_provider(tmp_path: Path) -> None:
    result = fleet(["doctor", "--smoke"], tmp_path, {})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pass  configuration" in result.stdout
    assert "pass  sandbox: local sandbox (bubblewrap) works" in result.stdout
    assert "pass  smoke turn" in result.stdout
    assert "FAIL  model endpoint: no model configured" in result.stdout


def test_doctor_reports_an_unreachable_endpoint_with_the_fix(tmp_path: Path) -> None:
    env = {"FLEET_LM_MODEL": "openai/x", "FLEET_LM_BASE_URL": "http://127.0.0.1:9/v1"}
    result = fleet(["doctor"], tmp_path, env)
    assert result.returncode == 1
    assert "FAIL  model endpoint" in result.stdout
    assert "fix: check FLEET_LM_BASE_URL" in result.stdout


def test_doctor_names_a_bad_config_key(tmp_path: Path) -> None:
    (tmp_path / "fleet.toml").write_text("no_such_setting = 1\n")
    result = fleet(["doctor"], tmp_path, {})
    assert result.returncode == 1
    assert "FAIL  configuration" in result.stdout and "no_such_setting" in result.stdout


def test_doctor_shows_each_whole_sandbox_protection(tmp_path: Path) -> None:
    result = fleet(["doctor"], tmp_path, {})
    lines = result.stdout.splitlines()
    for name in ("memory cgroup", "process-count cgroup", "sized /tmp", "CPU time", "seccomp", "disk quota"):
        assert any(f"  limit: {name}: " in line for line in lines), result.stdout
    if os.getuid() == 0:  # as root (as CI runs) this machine enforces every one
        assert "pass  limit: memory cgroup: enforced: 2048 MB for all processes and /tmp together" in result.stdout
        assert "pass  limit: seccomp: enforced" in result.stdout
        assert "pass  limit: disk quota: enforced" in result.stdout


def test_an_unknown_sandbox_backend_is_named_by_doctor_and_refused_by_run_and_serve(tmp_path: Path) -> None:
    env = {
        "FLEET_SANDBOX_BACKEND": "daytona",
        "FLEET_LM_MODEL": "openai/x",
        "FLEET_LM_BASE_URL": "http://127.0.0.1:9/v1",
    }
    doctor = fleet(["doctor"], tmp_path, env)
    assert doctor.returncode == 1
    assert "FAIL  sandbox: unknown sandbox backend 'daytona'" in doctor.stdout
    assert "fix: set sandbox_backend to one of: local" in doctor.stdout
    for command in (["run", "hello"], ["serve", "--port", "9"]):
        refused = fleet(command, tmp_path, env)
        assert refused.returncode == 2, refused.stderr
        assert "fleet: error: unknown sandbox backend 'daytona'" in refused.stderr
        assert "known backends: local" in refused.stderr


def test_doctor_says_whether_the_endpoint_constrains_replies_to_a_schema(tmp_path: Path) -> None:
    with ScriptedModelServer(ScriptedModel(json_schema="honour")) as honouring:
        honouring.script("m", '{"ok": true}')
        env = {"FLEET_LM_MODEL": "openai/m", "FLEET_LM_BASE_URL": honouring.base_url, "COLUMNS": "300"}
        result = fleet(["doctor"], tmp_path, env)
    assert "pass  reply schema: the endpoint constrains replies to a JSON schema (json_schema)" in result.stdout

    with ScriptedModelServer(ScriptedModel(json_schema="refuse")) as refusing:
        env = {"FLEET_LM_MODEL": "openai/m", "FLEET_LM_BASE_URL": refusing.base_url, "COLUMNS": "300"}
        result = fleet(["doctor"], tmp_path, env)
    assert (
        "warn  reply schema: json_schema: refused (400); json_object_schema: refused (400): replies use DSPy's chat "
        "format, which a small model does not always follow"
    ) in result.stdout
    assert "fix: serve the model where response_format takes a JSON schema" in result.stdout
