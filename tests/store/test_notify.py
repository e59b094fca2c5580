"""Notifications are sent when their transaction commits, every distinct payload once, on PostgreSQL."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy import text

from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.store import Store
from fleet_rlm.store.notify import Channel, Listener, notify

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


async def test_stored_events_notify_each_of_their_turns_once_and_a_gone_turns_events_are_refused(
    store: Store,
) -> None:
    turns = []
    for _ in range(3):
        session = await store.create_session()
        turn, _ = await store.create_turn(session.id, "go")
        turns.append(turn.id)
    events = [event(turn_id, seq) for turn_id in turns for seq in (1, 2)]
    if store.db.is_sqlite:
        await store.append_events(events)
        assert [e.seq for e in await store.events_after(turns[0])] == [1, 2]
        return
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(store.db.url.set(drivername="postgresql").render_as_string(hide_password=False))
    try:
        await listener.add_listener(Channel.EVENTS.value, lambda *args: heard.put_nowait(args[3]))
        await store.append_events(events)
        received = [await asyncio.wait_for(heard.get(), 5) for _ in turns]
        assert sorted(received) == sorted(turns)
        for turn_id in turns:
            assert await store.events_after(turn_id) == [e for e in events if e.turn_id == turn_id]

        # An event of a turn that is gone (or ended) is refused, and only its turn goes unnotified.
        assert await store.append_events([event(turns[0], 3), event("turn_gone", 1)]) == {"turn_gone"}
        assert await asyncio.wait_for(heard.get(), 5) == turns[0]
        await asyncio.sleep(0.2)
        assert heard.empty(), "a turn whose events were refused was notified"
        assert [e.seq for e in await store.events_after(turns[0])] == [1, 2, 3]
    finally:
        await listener.close()


async def test_an_event_stored_alone_keeps_the_same_text_as_one_stored_with_a_turns_start(store: Store) -> None:
    """A replay is byte-identical to the live stream: the JSON text is the same whichever way it was stored."""
    data = {"text": "é\u2028 ✓", "n": [1, 2.5, None], "nested": {"b": 1, "a": 2}}
    session = await store.create_session()
    turn, _ = await store.create_turn(session.id, "go")
    await store.mark_running(turn.id, events=[event(turn.id, 1, **data)])
    await store.append_events([event(turn.id, 2, **data)])
    async with store.db.read_connection() as connection:
        stored = (await connection.execute(text("SELECT CAST(data AS TEXT) FROM events ORDER BY seq"))).scalars()
        first, second = list(stored)
    assert first == second


def event(turn_id: str, seq: int, **data: object) -> Event:
    return Event(
        type=EventType.OUTPUT, seq=seq, turn_id=turn_id, ts=1.5, span_id="span_a", parent_span_id=None, data=dict(data)
    )


async def test_storing_events_again_after_a_lost_answer_keeps_the_first_and_fails_nothing(store: Store) -> None:
    """A write whose answer was lost (the connection dropped after it committed) is retried: the retry
    stores what is new, leaves what was stored, and does not fail."""
    session = await store.create_session()
    turn, _ = await store.create_turn(session.id, "go")
    first = [event(turn.id, 1, text="first"), event(turn.id, 2, text="second")]
    await store.append_events(first)
    await store.append_events([*first, event(turn.id, 3, text="third")])
    assert [(e.seq, e.data["text"]) for e in await store.events_after(turn.id)] == [
        (1, "first"),
        (2, "second"),
        (3, "third"),
    ]


async def test_a_listener_whose_connection_breaks_in_any_way_reconnects_and_hears_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncpg raises its own InternalClientError when a connection breaks mid-operation (a terminated
    backend); the listener must reconnect, not end for good (the process would hear nothing more)."""
    if store.db.is_sqlite:
        pytest.skip("SQLite has no notifications")
    add_listener = asyncpg.Connection.add_listener
    broken = 0

    async def breaking_once(self: asyncpg.Connection, channel: str, callback: object) -> None:
        nonlocal broken
        if not broken:
            broken += 1
            raise asyncpg.InternalClientError("cannot switch to state 11; another operation (2) is in progress")
        await add_listener(self, channel, callback)  # type: ignore[arg-type]

    monkeypatch.setattr(asyncpg.Connection, "add_listener", breaking_once)
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = Listener(store.db, {Channel.EVENTS: heard.put_nowait}, lambda: None)
    listener.start()
    try:
        await asyncio.wait_for(listener.connected.wait(), 10)
        async with store.db.write() as session:
            await notify(store.db, session, Channel.EVENTS, ["turn_a"])
        assert await asyncio.wait_for(heard.get(), 5) == "turn_a"
        assert broken == 1
    finally:
        await listener.close()
