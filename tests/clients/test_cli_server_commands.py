"""``fleet serve``, ``fleet run --url`` (its function) and ``fleet sessions``, against a real server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from fleet_rlm.api.client import FleetClient
from fleet_rlm.clients.cli import remote_run
from fleet_rlm.clients.cli.app import app
from fleet_rlm.clients.cli.remote_run import run_remote
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.settings import scripted_settings
from tests.api.server import free_port, server_in_thread

SAVE = "open('artifacts/out.csv','w').write(open('files/in.csv').read().upper())\nSUBMIT(answer='shouted')"


def clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update({"FLEET_HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config")})
    return env


def test_serve_runs_the_api_and_refuses_open_binds_without_a_token(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    refused = subprocess.run(
        [sys.executable, "-m", "fleet_rlm", "serve", "--host", "0.0.0.0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "FLEET_API_TOKEN" in refused.stderr

    port = free_port()
    env["FLEET_SANDBOX_POOL_SIZE"] = "0"
    server = subprocess.Popen(
        [sys.executable, "-m", "fleet_rlm", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        for _ in range(600):
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=1)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stdout.read().decode() if server.stdout else ""
                time.sleep(0.1)
        assert health.json()["status"] == "ok"
        assert (tmp_path / "home" / "fleet.db").exists()
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stdout:
            server.stdout.close()


def test_run_through_a_server_then_manage_its_sessions(
    model_server: ScriptedModelServer,
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in [k for k in os.environ if k.startswith("FLEET_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("FLEET_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "in.csv"
    source.write_text("a,b\n1,2\n")
    runner = CliRunner()
    settings = scripted_settings(model_server, home, sandbox_pool_size=0)
    with server_in_thread(settings) as api:
        model_server.script("root", rlm_step("Shout.", SAVE))
        ran = runner.invoke(app, ["run", "shout the csv", "--url", api.base_url, "--file", str(source), "--json"])
        assert ran.exit_code == 0, ran.output
        events = [json.loads(line) for line in ran.output.splitlines() if line.startswith("{")]
        assert events[-1]["type"] == "turn.completed" and events[-1]["data"]["answer"] == "shouted"
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        model_server.script(
            "root", rlm_step("Shout.", SAVE.replace("SUBMIT", "remember('the csv shouts', 'saw it')\nSUBMIT"))
        )
        code = run_remote(
            api.base_url, "again", files=[source], as_json=False, context_paths=[], download_to=tmp_path / "got"
        )
        assert code == 0
        shown = capsys.readouterr().out
        assert "shouted" in shown and "✎ remembered (pending review): the csv shouts" in shown
        assert (tmp_path / "got" / "out.csv").read_text() == "A,B\n1,2\n"

        listed = runner.invoke(app, ["sessions", "ls", "--url", api.base_url, "--json"])
        assert listed.exit_code == 0, listed.output
        sessions = json.loads(listed.output)
        assert len(sessions) == 2
        session = sessions[0]
        shown = json.loads(
            runner.invoke(app, ["sessions", "show", session["id"], "--url", api.base_url, "--json"]).output
        )
        assert [t["status"] for t in shown["turns"]] == ["completed"]
        assert {f["path"] for f in shown["files"]} == {"files/in.csv", "artifacts/out.csv"}

        archive = tmp_path / "s.fleet.tar.gz"
        exported = runner.invoke(app, ["sessions", "export", session["id"], "--url", api.base_url, "-o", str(archive)])
        assert exported.exit_code == 0 and archive.stat().st_size > 0
        imported = runner.invoke(app, ["sessions", "import", str(archive), "--url", api.base_url, "--name", "copy"])
        assert imported.exit_code == 0 and "(copy)" in imported.output

        model_server.script("root", rlm_step("Fail.", "raise SystemExit(3)"))
        failing = runner.invoke(
            app, ["run", "break", "--url", api.base_url, "--session", "copy", "--max-iterations", "1"]
        )
        # Its only execution failed: no result, and it says so rather than extracting one.
        assert failing.exit_code == 4 and "turn incomplete" in failing.output

    local = json.loads(runner.invoke(app, ["sessions", "ls", "--json"]).output)
    assert sorted(s["name"] or "" for s in local) == ["", "", "copy"]
    copy = json.loads(runner.invoke(app, ["sessions", "show", "copy", "--json"]).output)
    assert [t["status"] for t in copy["turns"]] == ["completed", "incomplete"]
    assert runner.invoke(app, ["sessions", "rm", "copy"]).exit_code == 0
    missing = runner.invoke(app, ["sessions", "show", "copy"])
    assert missing.exit_code == 1 and "no session 'copy'" in missing.output
    table = runner.invoke(app, ["sessions", "ls"])
    assert session["id"] in table.output


def recording_clients(monkeypatch: pytest.MonkeyPatch) -> list[httpx.Request]:
    """Every request ``fleet run --url``'s clients send, in order."""
    sent: list[httpx.Request] = []

    class RecordingClient(FleetClient):
        def __init__(self, base_url: str, **kwargs: Any) -> None:
            super().__init__(base_url, **kwargs)
            self.http.event_hooks = {"request": [sent.append], "response": []}

    monkeypatch.setattr(remote_run, "FleetClient", RecordingClient)
    return sent


def test_run_through_a_server_submits_and_streams_in_one_request(
    model_server: ScriptedModelServer,
    home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent = recording_clients(monkeypatch)
    model_server.script("root", rlm_step("Greet.", "print('hello there')\nSUBMIT(answer='hi')"))
    with server_in_thread(scripted_settings(model_server, home, sandbox_pool_size=0)) as api:
        code = run_remote(api.base_url, "say hello", files=[], as_json=True, context_paths=[])
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "turn.completed" and events[-1]["data"]["answer"] == "hi"
    turn_id = events[-1]["turn_id"]
    submission = next(r for r in sent if r.method == "POST" and r.url.path.endswith("/turns"))
    assert submission.headers["accept"] == "text/event-stream"
    on_turns = [(r.method, r.url.path) for r in sent if "/turns" in r.url.path]
    assert on_turns == [("POST", submission.url.path), ("GET", f"/api/v1/turns/{turn_id}")], "no GET of /events"


def test_ctrl_c_cancels_a_streamed_turn_on_the_server(
    model_server: ScriptedModelServer,
    home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent = recording_clients(monkeypatch)
    model_server.script("root", rlm_step("Slow.", "print('started', flush=True)\nimport time\ntime.sleep(30)"))
    default = signal.getsignal(signal.SIGINT)

    def press_ctrl_c_once_handled() -> None:
        deadline = time.monotonic() + 60
        while signal.getsignal(signal.SIGINT) is default and time.monotonic() < deadline:
            time.sleep(0.02)
        if signal.getsignal(signal.SIGINT) is not default:  # never a real Ctrl-C to pytest itself
            os.kill(os.getpid(), signal.SIGINT)

    with server_in_thread(scripted_settings(model_server, home, sandbox_pool_size=0)) as api:
        threading.Thread(target=press_ctrl_c_once_handled, daemon=True).start()
        code = run_remote(api.base_url, "slow", files=[], as_json=True, context_paths=[])
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 130 and events[-1]["type"] == "turn.cancelled"
    assert [r.url.path for r in sent if r.url.path.endswith("/cancel")] == [
        f"/api/v1/turns/{events[-1]['turn_id']}/cancel"
    ]


def test_worker_and_serve_without_workers_refuse_sqlite_saying_what_they_need(tmp_path: Path) -> None:
    """On the embedded database one process runs everything; a worker there would never be told of turns."""
    env = clean_env(tmp_path)
    for command in (["worker"], ["serve", "--no-workers"]):
        refused = subprocess.run(
            [sys.executable, "-m", "fleet_rlm", *command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == 2, refused.stderr
        assert "PostgreSQL" in refused.stderr and "SQLite" in refused.stderr
    assert not (tmp_path / "home" / "fleet.db").exists(), "a refused command touched the database"
