from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from fleet_rlm.service.service import FleetService
from fleet_rlm.store import Database
from fleet_rlm.testing.settings import SettingsFactory
from tests.store.databases import database_url, postgres_databases, store

__all__ = ["database_url", "postgres_databases", "store"]


@pytest.fixture
def settings_defaults(database_url: str) -> dict[str, Any]:
    """What this directory's ``make_settings`` sets before a test's own overrides."""
    return {"database_url": database_url, "sandbox_pool_size": 1}


@pytest.fixture
async def service(make_settings: SettingsFactory) -> AsyncIterator[FleetService]:
    settings = make_settings()
    fleet = FleetService(settings, database=Database(str(settings.database_url)))
    await fleet.start()
    yield fleet
    await fleet.stop()
