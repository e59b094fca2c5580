"""Notifications are sent when their transaction commits, every distinct payload once, on PostgreSQL."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from fleet_rlm.store import Store
from fleet_rlm.store.notify import Channel, notify

pytestmark = pytest.mark.anyio


async def test_a_transaction_notifies_each_distinct_payload_once_when_it_commits(store: Store) -> None:
    payloads = [f"turn_{index}" for index in range(40)]
    if store.db.is_sqlite:  # one process runs everything: nothing is sent, and nothing fails
        async with store.db.write() as session:
            await notify(store.db, session, Channel.EVENTS, payloads)
        return
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(store.db.url.set(drivername="postgresql").render_as_string(hide_password=False))
    try:
        await listener.add_listener(Channel.EVENTS.value, lambda *args: heard.put_nowait(args[3]))
        async with store.db.write() as session:
            await notify(store.db, session, Channel.EVENTS, [*payloads, *payloads[:5]])
            await notify(store.db, session, Channel.EVENTS, [])
            await asyncio.sleep(0.2)
            assert heard.empty(), "a notification was delivered before its transaction committed"
        received = [await asyncio.wait_for(heard.get(), 5) for _ in payloads]
        assert sorted(received) == sorted(payloads)
        await asyncio.sleep(0.2)
        assert heard.empty(), "a payload was delivered twice"
    finally:
        await listener.close()
