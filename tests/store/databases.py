"""Throwaway databases for tests: a SQLite file per test, or a PostgreSQL database per test cloned
from one template migrated once per run (so concurrent runs and tests never share tables), or
created empty for tests that migrate it themselves."""

from __future__ import annotations

import asyncio
import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from fleet_rlm.store import Database, Store

POSTGRES_ADMIN_DSN = os.environ.get("FLEET_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def _async_url(dsn: str, database: str) -> str:
    base = dsn.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
    return f"{base}/{database}"


async def _admin(*statements: str) -> None:
    connection = await asyncpg.connect(POSTGRES_ADMIN_DSN, timeout=5)
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()


async def _drop_leftovers() -> None:
    """Drop databases left by test runs that were killed (their pid is gone)."""
    connection = await asyncpg.connect(POSTGRES_ADMIN_DSN, timeout=5)
    try:
        names = [r["datname"] for r in await connection.fetch("SELECT datname FROM pg_database")]
        for name in names:
            match = re.fullmatch(r"fleet_test_(\d+)_[0-9a-f]{6}_\w+", name)
            if match and not Path(f"/proc/{match[1]}").exists():
                await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await connection.close()


class PostgresDatabases:
    def __init__(self) -> None:
        self.prefix = f"fleet_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.template = f"{self.prefix}_template"
        self.created: list[str] = []
        self._ready = False
        self._cleaned = False

    def _create(self, name: str, template: str | None = None) -> None:
        try:
            if not self._cleaned:
                asyncio.run(_drop_leftovers())
                self._cleaned = True
            asyncio.run(_admin(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
        except (OSError, asyncpg.PostgresError) as exc:
            pytest.fail(
                f"PostgreSQL at {POSTGRES_ADMIN_DSN} is not usable ({exc}); start it (.ci/run does) "
                "or deselect these tests with -m 'not postgres'"
            )
        self.created.append(name)

    def _prepare_template(self) -> None:
        self._create(self.template)

        async def migrate() -> None:
            database = Database(_async_url(POSTGRES_ADMIN_DSN, self.template))
            await database.migrate()
            await database.dispose()

        asyncio.run(migrate())
        self._ready = True

    def new_url(self, *, migrated: bool = True) -> str:
        """A new database: a copy of the migrated template, or (``migrated=False``) an empty one."""
        if migrated and not self._ready:
            self._prepare_template()
        name = f"{self.prefix}_{len(self.created)}"
        self._create(name, self.template if migrated else None)
        return _async_url(POSTGRES_ADMIN_DSN, name)

    def drop(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self.created.remove(name)

    def drop_all(self) -> None:
        if self.created:
            asyncio.run(_admin(*(f'DROP DATABASE IF EXISTS "{n}" WITH (FORCE)' for n in reversed(self.created))))
            self.created.clear()


@pytest.fixture(scope="session")
def postgres_databases() -> Iterator[PostgresDatabases]:
    databases = PostgresDatabases()
    yield databases
    databases.drop_all()


def _fresh_url(request: pytest.FixtureRequest, tmp_path: Path, *, migrated: bool) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'fleet.db'}"
        return
    databases: PostgresDatabases = request.getfixturevalue("postgres_databases")
    url = databases.new_url(migrated=migrated)
    yield url
    databases.drop(url)


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL on each backend (PostgreSQL ones come already migrated)."""
    yield from _fresh_url(request, tmp_path, migrated=True)


@pytest.fixture(params=BACKENDS)
def unmigrated_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database URL on each backend with no schema at all, for tests that migrate it themselves."""
    yield from _fresh_url(request, tmp_path, migrated=False)


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    """A store on a fresh, migrated database of each kind."""
    database = Database(database_url)
    await database.migrate()
    yield Store(database)
    await database.dispose()
