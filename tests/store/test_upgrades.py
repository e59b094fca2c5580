"""Upgrades lose nothing: a database built at any schema revision, with rows in every table, keeps every
row and value when it is upgraded to the newest revision, on SQLite and PostgreSQL; and Fleet backs up
a SQLite file before it migrates it.

The revisions come from the migrations directory and the rows from the schema at each revision
(:mod:`tests.store.filling`), so a new migration is covered as soon as it is added.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from fleet_rlm.store import Database, Store
from fleet_rlm.store.database import MIGRATIONS_DIR, head_revision
from fleet_rlm.testing.cli import run_fleet

from .filling import ROWS_PER_TABLE, Snapshot, fill, losses, snapshot

pytestmark = pytest.mark.anyio


def revisions() -> list[str]:
    """Every schema revision, oldest first (the newest is head)."""
    return [script.revision for script in reversed(list(ScriptDirectory(str(MIGRATIONS_DIR)).walk_revisions()))]


async def build_at(url: str, revision: str) -> tuple[Database, Snapshot]:
    """A database at ``revision`` with rows in every table, and what it holds."""
    database = Database(url)
    assert await database.migrate(revision) is None  # a new database has nothing to back up
    assert await database.revision() == revision
    async with database.write_engine.begin() as connection:
        filled = await connection.run_sync(fill)
    assert filled and set(filled.values()) == {ROWS_PER_TABLE}
    async with database.read_engine.connect() as connection:
        return database, await connection.run_sync(snapshot)


async def read_through_the_store(database: Database, held: Snapshot) -> None:
    """Fleet itself reads back every session, turn, event and file the database held."""
    store = Store(database)
    for session_id in held["sessions"]:
        assert (await store.get_session(*session_id)).id == session_id[0]
        files = await store.list_files(*session_id)
        assert {f.path for f in files} == {path for sid, path in held["files"] if sid == session_id[0]}
    for (turn_id,) in held["turns"]:
        turn = await store.get_turn(turn_id)
        events = await store.events_after(turn_id, -1)
        assert [e.seq for e in events] == sorted(seq for tid, seq in held["events"] if tid == turn_id)
        assert turn.status.value == held["turns"][turn_id,]["status"]


@pytest.mark.parametrize("revision", revisions())
async def test_upgrading_from_every_revision_keeps_every_row_and_value(
    unmigrated_database_url: str, revision: str
) -> None:
    database, before = await build_at(unmigrated_database_url, revision)
    try:
        await database.migrate()
        assert await database.revision() == head_revision()
        async with database.read_engine.connect() as connection:
            after = await connection.run_sync(snapshot)
        problems = losses(before, after)
        assert not problems, "\n".join(problems)
        await read_through_the_store(database, after)
    finally:
        await database.dispose()


def test_there_is_a_past_revision_to_upgrade_from() -> None:
    assert len(revisions()) >= 2 and revisions()[-1] == head_revision()


def fleet_sessions(cwd: Path) -> list[dict[str, object]]:
    listed = run_fleet(["sessions", "ls", "--json"], cwd)
    assert listed.returncode == 0, listed.stderr
    sessions: list[dict[str, object]] = json.loads(listed.stdout)
    return sessions


def stored_revision(path: Path) -> str:
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        (version,) = connection.execute("SELECT version_num FROM alembic_version").fetchone()
        return str(version)


async def test_fleet_backs_up_a_sqlite_file_before_migrating_it_and_not_when_it_is_current(tmp_path: Path) -> None:
    oldest = revisions()[0]
    data_dir = tmp_path / "home"  # run_fleet's FLEET_HOME: the data dir
    path = data_dir / "fleet.db"
    database, before = await build_at(f"sqlite+aiosqlite:///{path}", oldest)
    await database.dispose()

    sessions = fleet_sessions(tmp_path)

    assert {s["id"] for s in sessions} == {key[0] for key in before["sessions"]}
    (backup,) = data_dir.glob("fleet-backup-*.db")
    assert re.fullmatch(rf"fleet-backup-{oldest}-\d{{8}}T\d{{6}}Z\.db", backup.name), backup.name
    assert stored_revision(backup) == oldest
    with sqlite3.connect(backup) as connection:
        for table, rows in before.items():
            assert connection.execute(f"SELECT count(*) FROM {table}").fetchone() == (len(rows),)
    assert stored_revision(path) == head_revision()

    # Already at the newest revision: nothing to back up.
    files = sorted(data_dir.iterdir())
    assert fleet_sessions(tmp_path) == sessions
    assert sorted(data_dir.iterdir()) == files


async def test_a_new_or_current_sqlite_file_is_not_backed_up(tmp_path: Path) -> None:
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'fleet.db'}")
    try:
        assert await database.migrate() is None
        assert await database.migrate() is None
    finally:
        await database.dispose()
    assert sorted(p.name for p in tmp_path.iterdir() if "backup" in p.name) == []
