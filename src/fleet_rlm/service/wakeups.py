"""Waking the readers of a turn that another process runs, when its events were stored.

A reader of stored events sleeps until a notification says the turn has new events (or a short poll
interval passes, the fallback when notifications are not delivered: SQLite, or a dropped listening
connection). Everything here runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict


class Wakeups:
    def __init__(self) -> None:
        self._waiting: defaultdict[str, set[asyncio.Event]] = defaultdict(set)

    async def wait(self, turn_id: str, timeout: float) -> None:
        """Until ``turn_id`` is woken, or ``timeout`` seconds passed."""
        woken = asyncio.Event()
        self._waiting[turn_id].add(woken)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), timeout)
        finally:
            waiting = self._waiting.get(turn_id)
            if waiting is not None:
                waiting.discard(woken)
                if not waiting:
                    del self._waiting[turn_id]

    def wake(self, turn_id: str) -> None:
        for woken in self._waiting.get(turn_id, ()):
            woken.set()

    def wake_all(self) -> None:
        for turn_id in list(self._waiting):
            self.wake(turn_id)
