"""Notifications between Fleet processes sharing one PostgreSQL database (LISTEN/NOTIFY).

A transaction that queues a turn, stores events, ends a turn or asks for a cancel sends a notification
on its channel, delivered when it commits; every process listening (API replicas, workers) hears it
within milliseconds. They are wake-ups, never the data: a listener reads what changed from the tables,
and each process also polls at a slow pace, so a notification lost while the listening connection
was down delays a reader, never misleads it. On SQLite nothing is sent or heard: one process runs
everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from enum import StrEnum

import asyncpg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from fleet_rlm.logs import FailureLog
from fleet_rlm.store.database import Database

log = logging.getLogger(__name__)

RECONNECT_SECONDS = 1.0


class Channel(StrEnum):
    QUEUED = "fleet_turn_queued"
    """A turn waits to be claimed (payload: its id)."""
    EVENTS = "fleet_turn_events"
    """A turn's events were stored, its terminal one perhaps (payload: its id)."""
    CANCEL = "fleet_turn_cancel"
    """A cancel was asked for a turn (payload: its id)."""


Handler = Callable[[str], None]
"""Called on the event loop with a notification's payload."""


async def notify(
    db: Database, session: AsyncSession | AsyncConnection, channel: Channel, payloads: Iterable[str]
) -> None:
    """Send ``payloads`` on ``channel`` when ``session``'s transaction commits (PostgreSQL only)."""
    if db.is_sqlite:
        return
    distinct = list(dict.fromkeys(payloads))
    if distinct:  # one round trip for all: a group commit may notify for dozens of turns
        await session.execute(_NOTIFY_ALL, {"channel": channel.value, "payloads": distinct})


_NOTIFY_ALL = text("SELECT pg_notify(:channel, payload) FROM unnest(CAST(:payloads AS text[])) AS payload")


class Listener:
    """One dedicated connection LISTENing on the channels a process handles; reconnects when it drops
    (``on_reconnect`` then runs, so the process can catch up on what it may have missed)."""

    def __init__(self, db: Database, handlers: dict[Channel, Handler], on_reconnect: Callable[[], None]) -> None:
        self._dsn = db.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._handlers = handlers
        self._on_reconnect = on_reconnect
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="notification-listener")

    async def _run(self) -> None:
        first = True
        connecting = FailureLog(log, "connecting to listen for notifications")
        while True:
            try:
                connection = await asyncpg.connect(self._dsn, timeout=10)
            except Exception:  # any failure to connect is tried again (the listener must never end)
                connecting.failed()
                await asyncio.sleep(RECONNECT_SECONDS)
                continue
            connecting.succeeded()
            lost = asyncio.Event()
            connection.add_termination_listener(lambda _connection, lost=lost: lost.set())
            try:
                for channel, handler in self._handlers.items():
                    await connection.add_listener(channel.value, self._deliver(handler))
                self.connected.set()
                if not first:
                    self._on_reconnect()
                first = False
                while not lost.is_set() and not connection.is_closed():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), RECONNECT_SECONDS * 5)
                    if not lost.is_set():
                        await connection.execute("SELECT 1")  # notices a dead peer
            except Exception as exc:  # whatever broke the connection (asyncpg's own state errors too)
                log.warning("the notification connection dropped (%s: %s); reconnecting", type(exc).__name__, exc)
            finally:
                self.connected.clear()
                with contextlib.suppress(Exception):
                    await connection.close(timeout=2)
            await asyncio.sleep(RECONNECT_SECONDS)

    @staticmethod
    def _deliver(handler: Handler) -> Callable[[object, int, str, str], None]:
        def deliver(_connection: object, _pid: int, _channel: str, payload: str) -> None:
            try:
                handler(payload)
            except Exception:
                log.exception("handling a notification failed")

        return deliver

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
