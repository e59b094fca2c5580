"""Waking the readers of a turn that another process runs, when its events were stored.

A reader of stored events sleeps until a notification says the turn has new events (or a short poll
interval passes, the fallback when notifications are not delivered: SQLite, or a dropped listening
connection). A reader watches the turn *before* it reads the store, so a wake-up that comes while it
reads (the turn started here, events stored elsewhere) is not lost until the next poll. Everything
here runs on the event loop.

The readers of a turn still queued (under a burst, dozens of streams wait for room) do not poll one
by one: the turns they wait on are looked at together, one read for all every
:data:`QUEUED_LOOK_SECONDS`, and the readers of each that is no longer queued are woken. That read
catches what no wake-up announces: on SQLite another process sharing the file (``fleet mcp`` beside
``fleet serve``) may claim and start a turn, and on PostgreSQL a notification is lost while the
listening connection is down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence

from fleet_rlm.logs import FailureLog

log = logging.getLogger(__name__)

QUEUED_LOOK_SECONDS = 0.5
"""How often the turns that readers wait on while they are queued are looked at (all in one read)."""

StillQueued = Callable[[Sequence[str]], Awaitable[set[str]]]
"""Those of the given turns that are still queued (the store's read)."""


class Watch:
    """One reader's interest in a turn's wake-ups, from the moment it was taken."""

    def __init__(self) -> None:
        self.woken = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        """Until the turn was woken since the watch began (at once if it already was), or ``timeout``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.woken.wait(), timeout)


class Wakeups:
    def __init__(self, still_queued: StillQueued) -> None:
        self._waiting: defaultdict[str, set[Watch]] = defaultdict(set)
        self._still_queued = still_queued
        self._queued: Counter[str] = Counter()
        self._looking: asyncio.Task[None] | None = None
        self._closed = False
        self._looking_failed = FailureLog(log, "looking at the queued turns streams wait on")

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

    @contextlib.contextmanager
    def while_queued(self, turn_id: str) -> Iterator[None]:
        """Until the block ends, look at ``turn_id`` with the other queued turns readers wait on, and
        wake its readers once it is no longer queued (started, ended or gone)."""
        self._queued[turn_id] += 1
        if not self._closed and (self._looking is None or self._looking.done()):
            self._looking = asyncio.create_task(self._look_at_queued(), name="queued-turns")
        try:
            yield
        finally:
            self._queued[turn_id] -= 1
            if self._queued[turn_id] == 0:
                del self._queued[turn_id]

    async def _look_at_queued(self) -> None:
        while self._queued:
            await asyncio.sleep(QUEUED_LOOK_SECONDS)
            turn_ids = list(self._queued)
            if not turn_ids:
                return
            try:
                still = await self._still_queued(turn_ids)
            except Exception:  # the readers' own polls are the fallback
                self._looking_failed.failed()
                continue
            self._looking_failed.succeeded()
            for turn_id in turn_ids:
                if turn_id not in still:
                    self.wake(turn_id)

    async def close(self) -> None:
        """Stop looking at queued turns (before the store closes)."""
        self._closed = True
        if self._looking is not None:
            self._looking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._looking
            self._looking = None
