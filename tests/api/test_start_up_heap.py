"""A server process sets its start-up objects aside from the garbage collector once started, so a full
collection under load walks only what turns made (fleet_rlm.heap)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from fleet_rlm.api.app import create_app
from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.testing.settings import scripted_settings


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_a_started_server_freezes_its_start_up_objects_and_still_collects_later_cycles(
    model_server: ScriptedModelServer, home: Path, tmp_path: Path
) -> None:
    settings = scripted_settings(model_server, home, database_url=f"sqlite+aiosqlite:///{tmp_path / 'fleet.db'}")
    with TestClient(create_app(settings)):
        assert gc.get_freeze_count() == 0, "an app inside another program (tests) leaves its heap alone"
    with TestClient(create_app(settings, freeze_start_up=True)):
        assert gc.get_freeze_count() > 100_000
        first, second = Node(), Node()
        first.other, second.other = second, first
        gone = weakref.ref(first)
        del first, second
        gc.collect()
        assert gone() is None, "a cycle made after start-up is still collected"
