from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from fleet_rlm.config import ConfigError, Settings
from fleet_rlm.store import Database, database_url
from fleet_rlm.store.database import head_revision
from fleet_rlm.store.tables import Base

pytestmark = pytest.mark.anyio


async def test_migrating_twice_reaches_head_and_matches_the_tables(database_url: str) -> None:
    database = Database(database_url)
    try:
        await database.migrate()
        await database.migrate()
        assert await database.revision() == head_revision()
        async with database.read_engine.connect() as connection:
            diff = await connection.run_sync(
                lambda sync: compare_metadata(MigrationContext.configure(sync), Base.metadata)
            )
        assert diff == [], "tables.py and the migrations disagree; add a revision"
    finally:
        await database.dispose()


def test_embedded_default_is_a_sqlite_file_in_the_data_dir(tmp_path: object) -> None:
    settings = Settings.model_validate({"home": str(tmp_path)})
    assert database_url(settings) == f"sqlite+aiosqlite:///{settings.data_dir / 'fleet.db'}"


@pytest.mark.parametrize(
    ("url", "complaint"),
    [("mysql+aiomysql://x/y", "driver 'mysql+aiomysql' is not supported"), ("not a url", "not a database URL")],
)
def test_unusable_database_url_is_refused_with_the_key_named(url: str, complaint: str) -> None:
    with pytest.raises(ConfigError, match="database_url") as caught:
        Database(url)
    assert complaint in str(caught.value)
