from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from fleet_rlm.config import Settings
from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.service.service import FleetService
from fleet_rlm.store import Database
from fleet_rlm.testing.settings import scripted_settings
from tests.store.databases import database_url, postgres_databases, store

__all__ = ["database_url", "postgres_databases", "store"]

SettingsFactory = Callable[..., Settings]


@pytest.fixture
def make_settings(model_server: ScriptedModelServer, home: Path, database_url: str) -> SettingsFactory:
    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {"database_url": database_url, "sandbox_pool_size": 1}
        values.update(overrides)
        return scripted_settings(model_server, home, **values)

    return make


@pytest.fixture
async def service(make_settings: SettingsFactory) -> AsyncIterator[FleetService]:
    settings = make_settings()
    fleet = FleetService(settings, database=Database(str(settings.database_url)))
    await fleet.start()
    yield fleet
    await fleet.stop()
