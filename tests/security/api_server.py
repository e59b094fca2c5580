"""The API security tests' server: a real ``fleet serve`` (the CLI in a child process, its output in a log)
against the scripted model. Test modules import its fixtures (kept out of conftest.py, which other
security tests share)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.testing.settings import scripted_env
from tests.api.server import ServerProcess

TOKEN = "s3cret-token-value"
StartServer = Callable[..., ServerProcess]


@pytest.fixture
def serve_env(model_server: ScriptedModelServer, home: Path, tmp_path: Path) -> dict[str, str]:
    return scripted_env(model_server, home, f"sqlite+aiosqlite:///{tmp_path / 'fleet.db'}", FLEET_API_TOKEN="")


@pytest.fixture
def fleet_serve(serve_env: dict[str, str], tmp_path: Path) -> Iterator[StartServer]:
    """``start(**env)``: ``fleet serve`` on a free loopback port with ``serve_env`` plus ``env``."""
    started: list[ServerProcess] = []

    def start(**env: str) -> ServerProcess:
        server = ServerProcess({**serve_env, **env}, tmp_path / f"serve-{len(started)}.log", cli=True)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


def http(server: ServerProcess, token: str | None = None, **kwargs: object) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=server.base_url + "/api/v1", headers=headers, timeout=60, **kwargs)  # type: ignore[arg-type]
