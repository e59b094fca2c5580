from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_rlm.config import Settings
from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.testing.settings import scripted_settings
from tests.store.databases import database_url, postgres_databases

from .server import RunningServer, server_in_thread

__all__ = ["database_url", "postgres_databases"]

SettingsFactory = Callable[..., Settings]


@pytest.fixture
def make_settings(model_server: ScriptedModelServer, home: Path, database_url: str) -> SettingsFactory:
    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {"database_url": database_url, "sandbox_pool_size": 1, "sse_heartbeat_seconds": 15}
        values.update(overrides)
        return scripted_settings(model_server, home, **values)

    return make


@pytest.fixture
def api(make_settings: SettingsFactory) -> Iterator[RunningServer]:
    """The server without pre-started sandboxes (turns start theirs cold)."""
    with server_in_thread(make_settings(sandbox_pool_size=0)) as server:
        yield server


@pytest.fixture
def pooled_api(make_settings: SettingsFactory) -> Iterator[RunningServer]:
    """The server with a pool of one pre-started sandbox, as ``fleet serve`` runs by default."""
    with server_in_thread(make_settings(sandbox_pool_size=1)) as server:
        yield server
