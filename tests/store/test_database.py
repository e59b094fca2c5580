"""The PostgreSQL connection pool: a pooled connection the server closed while it sat idle (a restart,
an idle timeout) is replaced before it is used, so the next read or write does not fail."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

import fleet_rlm.store.database as database
from fleet_rlm.store import Store

from .databases import POSTGRES_ADMIN_DSN

pytestmark = pytest.mark.anyio


async def close_every_connection(name: str) -> None:
    admin = await asyncpg.connect(POSTGRES_ADMIN_DSN, timeout=5)
    try:
        await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)
        while await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name):
            await asyncio.sleep(0.05)
    finally:
        await admin.close()


async def test_a_connection_the_server_closed_while_it_was_idle_is_replaced_before_use(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    if store.db.is_sqlite:
        pytest.skip("SQLite has no server to close connections")
    monkeypatch.setattr(database, "PING_AFTER_IDLE_SECONDS", 0.0)
    before = await store.create_session(name="before")
    assert store.db.url.database is not None
    await close_every_connection(store.db.url.database)

    assert (await store.get_session(before.id)).name == "before"
    await close_every_connection(store.db.url.database)
    after = await store.create_session(name="after")
    assert [s.name for s in await store.list_sessions()] == ["after", "before"]
    assert after.id != before.id
