"""SQLite connections that run each statement on the event loop's own thread.

aiosqlite runs every statement on a thread of its connection and resumes the caller through the event
loop, so each statement of a transaction (``BEGIN``, each ``SELECT`` or ``INSERT``, ``COMMIT``) waits
behind everything the loop has queued meanwhile: under the load benchmark that was ~10 ms per
statement, for work SQLite does in microseconds on a local file, and every turn's events waited for
several of them before they were published. These connections keep SQLAlchemy's aiosqlite dialect
(its URL, errors and type handling) but answer each call at once, without leaving the thread.

A statement never sleeps in SQLite while it runs here: the connection's ``busy_timeout`` is 0 and a
statement refused because another connection holds the lock (``SQLITE_BUSY``: another process
writing, or starting up the WAL) is retried after an asynchronous wait, so the event loop goes on
serving while it waits, for up to :data:`BUSY_SECONDS`. In WAL mode readers never wait for the
writer, and this process has one writing connection (see :mod:`fleet_rlm.store.database`).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any, TypeVar

from sqlalchemy.engine import URL
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

BUSY_SECONDS = 30.0
"""How long a statement waits for another connection's lock before the error is raised."""
PRAGMAS = ("journal_mode=WAL", "foreign_keys=ON", "busy_timeout=0", "synchronous=NORMAL")
SQLITE_BUSY = 5
SQLITE_BUSY_SNAPSHOT = 517
"""A transaction's snapshot is older than a commit it would write over: waiting never helps."""

T = TypeVar("T")


def is_busy(error: BaseException) -> bool:
    """SQLite refused because another connection holds a lock it needs, for now (primary code
    SQLITE_BUSY, except a stale snapshot, which only a new transaction gets past)."""
    code = getattr(error, "sqlite_errorcode", None)
    return (
        isinstance(error, sqlite3.OperationalError)
        and code is not None
        and code & 0xFF == SQLITE_BUSY
        and code != SQLITE_BUSY_SNAPSHOT
    )


async def _when_free(call: Callable[[], T]) -> T:
    """``call()``, retried after an asynchronous wait while SQLite answers SQLITE_BUSY."""
    try:
        return call()
    except sqlite3.OperationalError as error:
        if not is_busy(error):
            raise
    retrying = AsyncRetrying(
        retry=retry_if_exception(is_busy),
        wait=wait_exponential(multiplier=0.002, max=0.1),
        stop=stop_after_delay(BUSY_SECONDS),
        reraise=True,
    )
    return await retrying(_call, call)


async def _call(call: Callable[[], T]) -> T:
    return call()


class InlineCursor:
    """The part of aiosqlite's cursor SQLAlchemy's adapter uses."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    async def __aenter__(self) -> InlineCursor:
        return self

    async def __aexit__(self, *_: object) -> None:
        self._cursor.close()

    async def execute(self, sql: str, parameters: Any = ()) -> InlineCursor:
        await _when_free(lambda: self._cursor.execute(sql, parameters))
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> InlineCursor:
        rows = list(parameters)  # retried whole: an iterator would be spent by the refused attempt
        await _when_free(lambda: self._cursor.executemany(sql, rows))
        return self

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        return self._cursor.fetchmany(self._cursor.arraysize if size is None else size)

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    async def close(self) -> None:
        self._cursor.close()

    def __aiter__(self) -> InlineCursor:
        return self

    async def __anext__(self) -> Any:
        row = self._cursor.fetchone()
        if row is None:
            raise StopAsyncIteration
        return row

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value


class _Opening:
    """What ``connection.cursor()`` returns: entered (``async with`` or awaited), the cursor."""

    def __init__(self, connection: InlineConnection) -> None:
        self._connection = connection

    async def __aenter__(self) -> InlineCursor:
        return InlineCursor(self._connection._conn.cursor())

    def __await__(self) -> Any:
        return self.__aenter__().__await__()


class _AtOnce:
    """Stands for aiosqlite's queue of calls to its thread, which SQLAlchemy's adapter uses to set a
    connection's isolation level: each call is made as it is put."""

    def put_nowait(self, item: tuple[asyncio.Future[Any], Callable[[], Any]]) -> None:
        future, function = item
        try:
            future.set_result(function())
        except Exception as error:
            future.set_exception(error)


class InlineConnection:
    """The part of aiosqlite's connection SQLAlchemy's adapter uses; as in aiosqlite, ``_connection``
    is the sqlite3 connection (None once closed) and using a closed one raises "no active connection"
    when awaited, which the dialect takes for a lost connection (it is dropped from the pool)."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection: sqlite3.Connection | None = connection
        self._tx = _AtOnce()

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._connection is None:
            raise ValueError("no active connection")
        return self._connection

    def cursor(self) -> _Opening:
        return _Opening(self)

    async def execute(self, sql: str, parameters: Any = ()) -> InlineCursor:
        return await InlineCursor(self._conn.cursor()).execute(sql, parameters)

    async def commit(self) -> None:
        await _when_free(self._conn.commit)

    async def rollback(self) -> None:
        self._conn.rollback()

    async def close(self) -> None:
        self.stop()

    def stop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._conn.create_function(*args, **kwargs)

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction


def connector(url: URL) -> Callable[[], Awaitable[InlineConnection]]:
    """The ``async_creator`` of an engine on ``url``: connections in autocommit mode (SQLAlchemy's
    "begin" event issues ``BEGIN``), WAL, foreign keys on, no sleeping in SQLite."""
    dialect = url.get_dialect()()
    arguments, given = dialect.create_connect_args(url)
    database = str(arguments[0]) if arguments else ":memory:"
    options: dict[str, Any] = {**given, "check_same_thread": False, "isolation_level": None}

    async def connect() -> InlineConnection:
        connection = sqlite3.connect(database, **options)
        try:
            cursor = connection.cursor()
            for pragma in PRAGMAS:
                await _when_free(partial(cursor.execute, f"PRAGMA {pragma}"))
            cursor.close()
        except BaseException:
            connection.close()
            raise
        return InlineConnection(connection)

    return connect
