from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fleet_rlm.testing.settings import SettingsFactory
from tests.store.databases import database_url, postgres_databases

from .server import RunningServer, server_in_thread

__all__ = ["database_url", "postgres_databases"]


@pytest.fixture
def settings_defaults(database_url: str) -> dict[str, Any]:
    """What this directory's ``make_settings`` sets before a test's own overrides."""
    return {"database_url": database_url, "sandbox_pool_size": 1, "sse_heartbeat_seconds": 15}


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
