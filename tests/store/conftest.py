from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fleet_rlm.store import Database, Store

from .databases import database_url, postgres_databases, unmigrated_database_url

__all__ = ["database_url", "postgres_databases", "unmigrated_database_url"]


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    database = Database(database_url)
    await database.migrate()
    yield Store(database)
    await database.dispose()
