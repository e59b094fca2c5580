"""Waking the readers of a turn that another process runs, when its events were stored.

A reader of stored events sleeps until a notification says the turn has new events (or a short poll
interval passes, the fallback when notifications are not delivered: SQLite, or a dropped listening
connection). A reader watches the turn *before* it reads the store, so a wake-up that comes while it
reads (the turn started here, events stored elsewhere) is not lost until the next poll. Everything
here runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterator


class Watch:
    """One reader's interest in a turn's wake-ups, from the moment it was taken."""

    def __init__(self) -> None:
        self.woken = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        """Until the turn was woken since the watch began (at once if it already was), or ``timeout``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.woken.wait(), timeout)


class Wakeups:
    def __init__(self) -> None:
        self._waiting: defaultdict[str, set[Watch]] = defaultdict(set)

    @contextlib.contextmanager
    def watch(self, turn_id: str) -> Iterator[Watch]:
        """Watch ``turn_id`` from now until the block ends: read the store inside it, then wait."""
        watch = Watch()
        self._waiting[turn_id].add(watch)
        try:
            yield watch
        finally:
            waiting = self._waiting.get(turn_id)
            if waiting is not None:
                waiting.discard(watch)
                if not waiting:
                    del self._waiting[turn_id]

    def wake(self, turn_id: str) -> None:
        for watch in self._waiting.get(turn_id, ()):
            watch.woken.set()

    def wake_all(self) -> None:
        for turn_id in list(self._waiting):
            self.wake(turn_id)
