"""The embedded database while another program holds its write lock: the server's event loop goes on
serving, the write waits its turn, and a lock held too long is an error that loses nothing."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from fleet_rlm.store import Database, Store, sqlite_inline

pytestmark = pytest.mark.anyio

# Another program: takes the write lock, writes without committing, says so, keeps it, then commits.
HOLDER = """
import sqlite3, sys, time
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
connection.execute("UPDATE sessions SET title = 'changed by the other program'")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
connection.execute("COMMIT")
"""


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[tuple[Store, Path]]:
    path = tmp_path / "fleet.db"
    database = Database(f"sqlite+aiosqlite:///{path}")
    await database.migrate()
    yield Store(database), path
    await database.dispose()


@contextmanager
def write_lock_held(path: Path, seconds: float) -> Iterator[None]:
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), str(seconds)], stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        yield
        assert holder.wait(timeout=30) == 0


class Ticker:
    """Counts how often the event loop got to run it while something else waited."""

    def __init__(self) -> None:
        self.ticks = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.ticks += 1


async def test_a_write_waits_for_another_programs_lock_while_the_loop_goes_on(
    embedded: tuple[Store, Path],
) -> None:
    store, path = embedded
    before = await store.create_session(name="before", title="first")
    ticker = Ticker()
    ticking = asyncio.create_task(ticker.run())
    try:
        with write_lock_held(path, 0.8):
            started = time.monotonic()
            created = await store.create_session(name="during")
            waited = time.monotonic() - started
    finally:
        ticking.cancel()
    assert waited > 0.4, "the write did not wait for the other program's lock"
    assert ticker.ticks >= 15, f"the event loop ran only {ticker.ticks} times in {waited:.2f} s of waiting"
    assert (await store.get_session("during")).id == created.id
    assert (await store.get_session(before.id)).title == "changed by the other program"


async def test_reads_do_not_wait_for_another_programs_write(embedded: tuple[Store, Path]) -> None:
    store, path = embedded
    await store.create_session(name="kept", title="as committed")
    with write_lock_held(path, 2.0):
        started = time.monotonic()
        seen = await store.get_session("kept")
        assert time.monotonic() - started < 1.0, "the read waited for the other program's lock"
    assert seen.title == "as committed"  # the other program's write was not committed yet


async def test_a_lock_held_past_the_wait_is_an_error_and_loses_nothing(
    embedded: tuple[Store, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, path = embedded
    await store.create_session(name="earlier")
    monkeypatch.setattr(sqlite_inline, "BUSY_SECONDS", 0.3)
    with write_lock_held(path, 1.5), pytest.raises(OperationalError, match="database is locked"):
        await store.create_session(name="refused")
    created = await store.create_session(name="refused")  # the lock is free again
    assert {s.name for s in await store.list_sessions()} == {"earlier", "refused"}
    assert (await store.get_session("refused")).id == created.id


async def test_statements_run_on_the_event_loops_thread(embedded: tuple[Store, Path]) -> None:
    store, _ = embedded
    async with store.db.read_engine.connect() as connection:
        raw = await connection.get_raw_connection()
        await raw.driver_connection.create_function("thread_ident", 0, threading.get_ident)
        assert (await connection.execute(text("SELECT thread_ident()"))).scalar() == threading.get_ident()


async def test_a_connection_closed_under_the_pool_is_replaced(embedded: tuple[Store, Path]) -> None:
    store, _ = embedded
    async with store.db.write_engine.connect() as connection:  # the only writing connection
        raw = await connection.get_raw_connection()
        raw.driver_connection.stop()
    with pytest.raises(OperationalError, match="no active connection"):
        await store.create_session(name="on-the-closed-connection")
    created = await store.create_session(name="on-a-new-one")
    assert [s.id for s in await store.list_sessions()] == [created.id]


async def test_a_stale_snapshot_fails_at_once(embedded: tuple[Store, Path]) -> None:
    store, path = embedded
    await store.create_session(name="read-first")
    async with store.db.read_engine.connect() as connection:  # reads run outside transactions: begin one
        await connection.exec_driver_sql("BEGIN")
        try:
            assert (await connection.execute(text("SELECT count(*) FROM sessions"))).scalar() == 1
            other = sqlite3.connect(path, isolation_level=None)
            other.execute("UPDATE sessions SET title = 'committed meanwhile'")
            other.close()
            started = time.monotonic()
            with pytest.raises(OperationalError, match="database is locked"):
                await connection.execute(text("UPDATE sessions SET title = 'over a stale snapshot'"))
            assert time.monotonic() - started < sqlite_inline.BUSY_SECONDS / 10
        finally:
            await connection.exec_driver_sql("ROLLBACK")
    assert (await store.get_session("read-first")).title == "committed meanwhile"


async def test_a_connections_isolation_level_can_be_changed(embedded: tuple[Store, Path]) -> None:
    store, _ = embedded
    async with store.db.read_engine.connect() as connection:  # reads are in autocommit mode
        serializable = await connection.execution_options(isolation_level="SERIALIZABLE")
        assert (await serializable.execute(text("SELECT 1"))).scalar() == 1
