"""``fleet chat`` refusing to start, with one line saying why (no terminal needed to get there)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.testing.settings import scripted_settings
from tests.api.server import free_port, server_in_thread

from .tmux import chat_env


def chat(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleet_rlm", "chat", *args],
        cwd=tmp_path,
        env=chat_env(tmp_path, env or {}),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


class _NotFleet(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def other_service() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotFleet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_an_unreachable_url_is_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = chat(tmp_path, "--url", url)
    assert result.returncode == 1
    assert result.stderr.strip() == f"fleet: error: cannot reach a Fleet server at {url}"


def test_a_port_held_by_something_else_is_not_mistaken_for_fleet(tmp_path: Path, other_service: int) -> None:
    result = chat(tmp_path, env={"FLEET_SERVER_PORT": str(other_service)})
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"fleet: error: port {other_service} is taken by something that is not a Fleet server; "
        "set FLEET_SERVER_PORT to a free port or pass --url"
    )


def test_a_bad_configuration_names_the_key(tmp_path: Path) -> None:
    (tmp_path / "fleet.toml").write_text("server_prot = 1\n")
    result = chat(tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == "fleet: error: " + "tmp.toml: unknown key 'server_prot'".replace(
        "tmp.toml", str(tmp_path / "fleet.toml")
    )


def test_a_missing_session_id_is_not_created_as_a_name(
    tmp_path: Path, model_server: ScriptedModelServer, home: Path
) -> None:
    with server_in_thread(scripted_settings(model_server, home)) as server:
        result = chat(tmp_path, "--url", server.base_url, "--session", "ses_0000000000000000")
    assert result.returncode == 2
    assert result.stderr.strip() == "fleet: error: no session with id ses_0000000000000000; /sessions lists them"
    assert "Traceback" not in result.stdout + result.stderr
