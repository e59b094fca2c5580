"""``fleet run --mode``: the route flag end to end, through the real console script."""

from __future__ import annotations

import json
from pathlib import Path

from fleet_rlm.models.scripted import ScriptedModelServer, fields_reply

from .test_cli_run import fleet, model_env


def test_mode_direct_answers_without_code(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    model_server.script("root", fields_reply(reasoning="A greeting.", answer="Hello there."))
    result = fleet(["run", "Hello", "--mode", "direct", "--json"], tmp_path, model_env(model_server))
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[0]["type"] == "turn.started" and events[0]["data"]["mode"] == "direct"
    routes = [e["data"] for e in events if e["type"] == "route.selected"]
    assert routes == [{"route": "direct", "reason": "mode direct was requested", "mode": "direct"}]
    assert events[-1]["type"] == "turn.completed"
    assert events[-1]["data"]["answer"] == "Hello there."
    assert events[-1]["data"]["usage"]["route"] == "direct"
    assert not [e for e in events if e["type"] in ("code", "output")]


def test_mode_direct_with_a_file_fails_with_one_line(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    result = fleet(["run", "Summarise", "--file", "notes.txt", "--mode", "direct"], tmp_path, model_env(model_server))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "fleet: failed: mode direct cannot see workspace files and this turn has files; use mode hybrid, rlm or flex"
    )
    assert not model_server.model.requests


def test_an_unknown_mode_is_a_configuration_error(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    result = fleet(["run", "Hello", "--mode", "fast"], tmp_path, model_env(model_server))
    assert result.returncode == 2
    assert "'mode'" in result.stderr and "hybrid" in result.stderr
    assert "Traceback" not in result.stderr
