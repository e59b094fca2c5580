"""A server process sets its start-up objects aside from the garbage collector once started, so a full
collection under load walks only what turns made (fleet_rlm.heap)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from fleet_rlm.api import server
from fleet_rlm.api.app import create_app
from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.testing.settings import scripted_settings


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_a_started_server_freezes_its_start_up_objects(
    model_server: ScriptedModelServer, home: Path, tmp_path: Path
) -> None:
    settings = scripted_settings(model_server, home, database_url=f"sqlite+aiosqlite:///{tmp_path / 'fleet.db'}")
    with TestClient(create_app(settings)):
        assert gc.get_freeze_count() == 0, "an app inside another program (tests) leaves its heap alone"
    with TestClient(create_app(settings, freeze_start_up=True)):
        assert gc.get_freeze_count() > 100_000


def test_fleet_serve_builds_its_app_to_freeze_after_start_up(
    model_server: ScriptedModelServer, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[dict[str, Any]] = []

    def create_app(*args: Any, **kwargs: Any) -> object:
        built.append(kwargs)
        return object()

    class Server:
        started = True

        def __init__(self, config: object, service: object) -> None:
            self.config = config

        def run(self) -> None:
            pass

    monkeypatch.setattr(server, "create_app", create_app)
    monkeypatch.setattr(server, "ShutdownAwareServer", Server)
    settings = scripted_settings(model_server, home, database_url=f"sqlite+aiosqlite:///{tmp_path / 'fleet.db'}")
    server.serve(settings, host="127.0.0.1", port=1)
    assert [kwargs.get("freeze_start_up") for kwargs in built] == [True]
