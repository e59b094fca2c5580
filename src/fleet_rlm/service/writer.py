"""Storing events as they come, and only then handing them to live followers.

Persist-then-publish: an event a client has seen is already in the database, so after a crash the
stored stream (closed by ``turn.interrupted`` with the next ``seq``) extends exactly what every
client saw, and reconnecting with ``Last-Event-ID`` never skips or repeats anything.

One journal serves every turn of the process (group commit): each insert takes whatever all turns
emitted while the previous insert ran, so under load the number of transactions stays flat while
the number of turns grows, and each turn's events keep their ``seq`` order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable

from fleet_rlm.protocol.events import Event
from fleet_rlm.store import Store

log = logging.getLogger(__name__)

MAX_BATCH = 2000
RETRY_DELAYS = (0.05, 0.2, 1.0, 3.0)
Publish = Callable[[Event], None]


class EventJournal:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._queue: asyncio.Queue[tuple[Event, Publish]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._failed: dict[str, list[Event]] = defaultdict(list)

    def put(self, event: Event, publish: Publish) -> None:
        """Store ``event`` soon, then call ``publish(event)``."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="event-journal")
        self._queue.put_nowait((event, publish))

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            await self._write([event for event, _ in batch])
            for event, publish in batch:
                try:
                    publish(event)
                except Exception:
                    log.exception("turn %s: publishing event %d failed", event.turn_id, event.seq)
                self._queue.task_done()

    async def _write(self, batch: list[Event]) -> None:
        for delay in (*RETRY_DELAYS, None):
            try:
                await self.store.append_events(batch)
                return
            except Exception as exc:
                if delay is None:
                    # Followers still get them live; each turn's final commit retries its own.
                    log.error("could not store %d events: %s", len(batch), exc)
                    for event in batch:
                        self._failed[event.turn_id].append(event)
                    return
                await asyncio.sleep(delay)

    async def flush(self, turn_id: str) -> list[Event]:
        """Wait until everything put so far is stored and published; returns ``turn_id``'s events
        that could not be stored."""
        await self._queue.join()
        return self._failed.pop(turn_id, [])

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
