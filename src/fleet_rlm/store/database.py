"""Connecting to Fleet's database and migrating it.

SQLite (a file under Fleet's data directory) is the embedded default; PostgreSQL is selected with
``FLEET_DATABASE_URL=postgresql+asyncpg://...``. Writes go through :meth:`Database.write`, reads
through :meth:`Database.read` (or their ``_connection`` twins, for Core statements on the hot paths):
on SQLite the write engine opens ``BEGIN IMMEDIATE`` transactions on a single pooled connection, so
concurrent writers queue instead of failing with "database is locked", while WAL mode keeps readers
unblocked; SQLite statements run on the event loop's thread (:mod:`fleet_rlm.store.sqlite_inline`).
On both databases reads run outside transactions (autocommit), each statement on its own snapshot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event, make_url, text
from sqlalchemy.engine import Connection
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import ArgumentError, InvalidatePoolError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.pool import ConnectionPoolEntry

from fleet_rlm.config import ConfigError, Settings
from fleet_rlm.store.backup import back_up
from fleet_rlm.store.sqlite_inline import connector

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
PING_AFTER_IDLE_SECONDS = 1.0
"""A pooled PostgreSQL connection idle this long is checked before it is used again."""
_IDLE_SINCE = "fleet_idle_since"
_MIGRATION_LOCK_ID = 0x46_4C_45_45_54  # "FLEET": serializes concurrent migrators on PostgreSQL
SUPPORTED_DRIVERS = ("sqlite+aiosqlite", "postgresql+asyncpg")


def database_url(settings: Settings) -> str:
    """The configured URL, or the embedded SQLite file under the data directory."""
    if settings.database_url:
        return settings.database_url
    return f"sqlite+aiosqlite:///{settings.data_dir / 'fleet.db'}"


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


class Database:
    """The async engines and session factories of one database."""

    def __init__(self, url: str) -> None:
        try:
            parsed = make_url(url)
        except ArgumentError as exc:
            raise ConfigError(f"configuration key 'database_url': not a database URL: {url!r}") from exc
        if parsed.drivername not in SUPPORTED_DRIVERS:
            raise ConfigError(
                f"configuration key 'database_url': driver {parsed.drivername!r} is not supported; "
                f"use one of {', '.join(SUPPORTED_DRIVERS)}"
            )
        self.url = parsed
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        if self.is_sqlite:
            connect = connector(parsed)
            # Reads outside transactions, as on PostgreSQL: without BEGIN and ROLLBACK around it, a read of
            # one row costs a fifth less, and no read relies on a snapshot lasting across its statements.
            self.read_engine = create_async_engine(parsed, async_creator=connect, isolation_level="AUTOCOMMIT")
            self.write_engine = create_async_engine(
                parsed, async_creator=connect, pool_size=1, max_overflow=0, pool_timeout=60
            )
            _begin_immediately(self.write_engine)
        else:
            self.write_engine = create_async_engine(parsed, pool_size=10, max_overflow=20)
            _ping_after_idle(self.write_engine)
            # Reads run outside transactions: under READ COMMITTED each statement takes its own snapshot
            # inside one too, so BEGIN and ROLLBACK would only add two round trips to every read.
            self.read_engine = self.write_engine.execution_options(isolation_level="AUTOCOMMIT")
        self._reads = async_sessionmaker(self.read_engine, expire_on_commit=False)
        self._writes = async_sessionmaker(self.write_engine, expire_on_commit=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        return cls(database_url(settings))

    @property
    def display_url(self) -> str:
        return self.url.render_as_string(hide_password=True)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        async with self._reads() as session:
            yield session

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A session inside one transaction, committed when the block exits without error."""
        async with self._writes() as session, session.begin():
            yield session

    @asynccontextmanager
    async def read_connection(self) -> AsyncIterator[AsyncConnection]:
        """:meth:`read` for Core statements (tables, not mapped classes): for the hot paths, where an
        ORM session's own work is about a third of a short statement's CPU."""
        async with self.read_engine.connect() as connection:
            yield connection

    @asynccontextmanager
    async def write_connection(self) -> AsyncIterator[AsyncConnection]:
        """:meth:`write` for Core statements, as :meth:`read_connection`."""
        async with self.write_engine.begin() as connection:
            yield connection

    @asynccontextmanager
    async def one_statement_write(self) -> AsyncIterator[AsyncConnection]:
        """On PostgreSQL, a connection outside transactions for a write that is a single statement: it
        commits by itself, one round trip where ``BEGIN``, the statement and ``COMMIT`` are three. (On
        SQLite every write goes through the one writer: use :meth:`write_connection`.)"""
        if self.is_sqlite:
            raise RuntimeError("on SQLite every write goes through write_connection")
        async with self.read_engine.connect() as connection:
            yield connection

    @property
    def sqlite_file(self) -> Path | None:
        """The embedded database's file (None on PostgreSQL or for an in-memory SQLite database)."""
        if self.is_sqlite and self.url.database and self.url.database != ":memory:":
            return Path(self.url.database)
        return None

    async def migrate(self, target: str = "head") -> Path | None:
        """Bring the schema to ``target`` (the newest revision by default; idempotent; safe with concurrent
        servers). Creates the SQLite file's directory if needed, and backs the file up first when a
        migration is about to change a schema it already has; returns the backup's path, if one was made."""
        if self.sqlite_file is not None:
            self.sqlite_file.parent.mkdir(parents=True, exist_ok=True)
        async with self.write_engine.begin() as connection:
            # The lock (BEGIN IMMEDIATE on SQLite) is held from here on: the revision read below is the
            # one migrated from, and the backup cannot miss a concurrent write.
            if not self.is_sqlite:
                await connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _MIGRATION_LOCK_ID})
            return await connection.run_sync(_upgrade, target, self.sqlite_file)

    async def revision(self) -> str | None:
        async with self.read_engine.connect() as connection:
            return await connection.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())

    async def ping(self) -> None:
        """Raises if the database cannot be reached."""
        async with self.read_engine.connect() as connection:
            await connection.execute(text("SELECT 1"))

    async def dispose(self) -> None:
        await self.write_engine.dispose()
        if self.is_sqlite:  # on PostgreSQL the read engine is a view of the write engine's pool
            await self.read_engine.dispose()


def _upgrade(connection: Connection, target: str, sqlite_file: Path | None) -> Path | None:
    config = _alembic_config()
    config.attributes["connection"] = connection
    current = MigrationContext.configure(connection).get_current_revision()
    backup: Path | None = None
    if sqlite_file is not None and current is not None and _will_change(config, current, target):
        backup = back_up(sqlite_file, current)
        log.warning("backed up %s (schema revision %s) to %s before migrating it", sqlite_file, current, backup)
    command.upgrade(config, target)
    return backup


def _will_change(config: Config, current: str, target: str) -> bool:
    """Whether upgrading from ``current`` to ``target`` runs a migration (an unknown ``current``, from a
    newer Fleet, is left to Alembic to refuse)."""
    script = ScriptDirectory.from_config(config)
    wanted = script.get_revision(target)
    known = {revision.revision for revision in script.walk_revisions()}
    return current in known and wanted is not None and wanted.revision != current


def _ping_after_idle(engine: AsyncEngine) -> None:
    """Check a pooled connection that sat idle for :data:`PING_AFTER_IDLE_SECONDS` before handing it
    out (the server may have closed it meanwhile: a restart, an idle timeout); one that was in use
    moments ago is handed out as it is. ``pool_pre_ping`` checks every checkout, three round trips
    each on asyncpg (BEGIN, a statement, ROLLBACK), which under load doubled a short transaction's."""

    @event.listens_for(engine.sync_engine, "checkin")
    def _on_checkin(_connection: object, record: ConnectionPoolEntry) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(connection: DBAPIConnection, record: ConnectionPoolEntry, _proxy: object) -> None:
        idle_since = record.info.pop(_IDLE_SINCE, None)
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_SECONDS:
            return
        try:
            connection.ping()
        except Exception as exc:  # the server likely restarted: the pool replaces all it holds, as pre-ping does
            raise InvalidatePoolError(
                f"a pooled connection idle for {time.monotonic() - idle_since:.0f} s is gone"
            ) from exc


def _begin_immediately(engine: AsyncEngine) -> None:
    """Write transactions begin here, not in the driver (its connections are in autocommit mode), and
    take the write lock at once, so concurrent writers queue instead of failing midway."""

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
