"""Storing a turn's events as they come, and only then handing them to live followers.

Persist-then-publish: an event a client has seen is already in the database, so after a crash the
stored stream (closed by ``turn.interrupted`` with the next ``seq``) extends exactly what every
client saw, and reconnecting with ``Last-Event-ID`` never skips or repeats anything. One writer
task per turn inserts whatever accumulated during its previous insert, so a chatty turn costs few
transactions and events keep their ``seq`` order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from fleet_rlm.engine.events import Event
from fleet_rlm.store import Store

log = logging.getLogger(__name__)

MAX_BATCH = 500
RETRY_DELAYS = (0.05, 0.2, 1.0, 3.0)


class EventWriter:
    def __init__(self, store: Store, turn_id: str, on_stored: Callable[[Event], None]) -> None:
        self.store = store
        self.turn_id = turn_id
        self.on_stored = on_stored
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._task = asyncio.create_task(self._run(), name=f"events-{turn_id}")
        self.failed: list[Event] = []

    def put(self, event: Event) -> None:
        self._queue.put_nowait(event)

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            await self._write(batch)
            for event in batch:
                self.on_stored(event)
                self._queue.task_done()

    async def _write(self, batch: list[Event]) -> None:
        for delay in (*RETRY_DELAYS, None):
            try:
                await self.store.append_events(batch)
                return
            except Exception as exc:
                if delay is None:
                    # Followers still get them live; the final commit retries storing them.
                    log.error("turn %s: could not store %d events: %s", self.turn_id, len(batch), exc)
                    self.failed.extend(batch)
                    return
                await asyncio.sleep(delay)

    async def drain(self) -> list[Event]:
        """Wait until everything put so far is handled; returns events that could not be stored."""
        await self._queue.join()
        failed, self.failed = self.failed, []
        return failed

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
