"""Storing events as they come, and only then handing them to live followers.

Persist-then-publish: an event a client has seen is already in the database, so after a crash the
stored stream (closed by ``turn.interrupted`` with the next ``seq``) extends exactly what every
client saw, and reconnecting with ``Last-Event-ID`` never skips or repeats anything.

One journal serves every turn of the process (group commit): each insert takes whatever all turns
emitted while the previous insert ran, so under load the number of transactions stays flat while
the number of turns grows, and each turn's events keep their ``seq`` order. A turn's end (its status,
answer, terminal event and file changes) goes into the same group commit, after the events put before
it: the turns of a process that end together commit together, and a turn's end never waits for
events of other turns put after it. Turns about to run are marked running the same way: on SQLite,
with one writer, every transaction saved is a wait saved for every other turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from tenacity import AsyncRetrying, stop_after_attempt, wait_chain, wait_fixed

from fleet_rlm.protocol.events import Event
from fleet_rlm.store import ProgramRecord, Store, TurnEnd, TurnRecord, TurnStart

log = logging.getLogger(__name__)

MAX_BATCH = 2000
RETRY_DELAYS = (0.05, 0.2, 1.0, 3.0)
Publish = Callable[[Event], None]
Refused = Callable[[str], None]
T = TypeVar("T")


@dataclass
class _Awaited(Generic[T]):
    """A change of a turn's state that goes into a group commit (or a flush barrier), and the caller
    waiting for its result."""

    done: asyncio.Future[T] = field(default_factory=lambda: asyncio.get_running_loop().create_future(), init=False)

    def settle(self, result: T | BaseException) -> None:
        if self.done.done():  # its turn stopped waiting
            return
        if isinstance(result, BaseException):
            self.done.set_exception(result)
        else:
            self.done.set_result(result)


@dataclass(frozen=True)
class Started:
    """A turn a group commit marked running, and the program it runs (None: the built-in one)."""

    program: ProgramRecord | None


@dataclass
class _Starting(_Awaited[Started | None]):
    start: TurnStart


@dataclass
class _Ending(_Awaited[TurnRecord]):
    end: TurnEnd


@dataclass
class _Flushing(_Awaited[None]):
    """Settled once everything queued before it is stored (or given up) and published."""


_Item = tuple[Event, Publish] | _Starting | _Ending | _Flushing


class JournalClosed(RuntimeError):
    """The process stopped storing turns' events before this change was stored."""

    def __init__(self) -> None:
        super().__init__("the server stopped storing turns' events before this change was stored")


class EventJournal:
    """``refused(turn_id)`` hears of a turn whose events the database refused because the turn already
    ended (another process ended it ``interrupted`` when this one's lease lapsed); those events are
    neither stored nor published."""

    def __init__(self, store: Store, refused: Refused = lambda _turn_id: None) -> None:
        self.store = store
        self._refused = refused
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._batch: list[_Item] = []
        """What the running group commit took from the queue (settled by :meth:`close` if cut short)."""
        self._closed = False
        self._failed: dict[str, list[Event]] = defaultdict(list)

    def put(self, event: Event, publish: Publish) -> None:
        """Store ``event`` soon, then call ``publish(event)``."""
        if self._closed:  # followers are gone; the turn's own final commit stores what it can
            self._failed[event.turn_id].append(event)
            return
        self._enqueue((event, publish))

    async def start(self, start: TurnStart) -> Started | None:
        """Mark a queued turn running in the next group commit; None when it is no longer queued
        (cancelled meanwhile). When the commit fails, raises its error (the caller may try alone)."""
        starting = _Starting(start)
        await self._wait(starting)
        return starting.done.result()

    async def finish(self, end: TurnEnd) -> TurnRecord:
        """End a turn in the next group commit, after the events put before (and with those of its events
        an earlier commit could not store); returns the turn as ended once the events are published.
        Raises ``Conflict`` (it already ended) or ``NotFound``; when the commit itself fails, raises its
        error and keeps the turn's unstored events for :meth:`flush`, so its caller can retry alone."""
        ending = _Ending(end)
        await self._wait(ending)
        return ending.done.result()

    async def flush(self, turn_id: str) -> list[Event]:
        """Wait until everything put so far is stored (or given up) and published; returns ``turn_id``'s
        events that could not be stored."""
        if not self._closed:
            with contextlib.suppress(JournalClosed):
                await self._wait(_Flushing())
        return self._failed.pop(turn_id, [])

    async def _wait(self, item: _Starting | _Ending | _Flushing) -> None:
        """Queue ``item`` and wait until it is settled (its error raised)."""
        if self._closed:
            raise JournalClosed()
        self._enqueue(item)
        await item.done

    def _enqueue(self, item: _Item) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="event-journal")
        self._queue.put_nowait(item)

    async def _run(self) -> None:
        while True:
            self._batch = [await self._queue.get()]
            while len(self._batch) < MAX_BATCH and not self._queue.empty():
                self._batch.append(self._queue.get_nowait())
            try:
                await self._commit_batch(self._batch)
            except Exception as exc:  # a bug: the journal must go on, and no caller wait forever
                log.exception("the event journal failed on a batch of %d", len(self._batch))
                for item in self._batch:
                    if isinstance(item, _Awaited):
                        item.settle(exc)
            for _ in self._batch:
                self._queue.task_done()
            self._batch = []

    async def _commit_batch(self, batch: list[_Item]) -> None:
        published = [item for item in batch if isinstance(item, tuple)]
        starts = [item for item in batch if isinstance(item, _Starting)]
        endings = [item for item in batch if isinstance(item, _Ending)]
        events = [event for event, _ in published]
        if starts or endings:
            # Settled here, their callers resume only after this task publishes the events below.
            refused = await self._commit(starts, events, endings)
        else:
            refused = await self._write(events)
        for turn_id in refused:
            try:
                self._refused(turn_id)
            except Exception:
                log.exception("turn %s: telling of its refused events failed", turn_id)
        for event, publish in published:
            if event.turn_id in refused:
                continue
            try:
                publish(event)
            except Exception:
                log.exception("turn %s: publishing event %d failed", event.turn_id, event.seq)
        for item in batch:
            if isinstance(item, _Flushing):
                item.settle(None)

    async def _commit(self, starts: list[_Starting], events: list[Event], endings: list[_Ending]) -> set[str]:
        """One transaction for the batch; settles each start and end (publishing is the caller's).
        Returns the turns whose events were refused (they already ended)."""
        ends = [replace(e.end, events=[*self._failed.get(e.end.turn_id, []), *e.end.events]) for e in endings]
        try:
            commit = await self.store.commit_turns(starts=[s.start for s in starts], events=events, ends=ends)
        except Exception as exc:
            log.warning(
                "could not commit %d starts and %d ends of turns with %d events: %s; the events alone are retried",
                len(starts),
                len(ends),
                len(events),
                exc,
            )
            refused = await self._write(events)
            for starting in starts:
                starting.settle(exc)
            for ending in endings:
                ending.settle(exc)
            return refused
        for starting in starts:
            starting.settle(Started(commit.program) if starting.start.turn_id in commit.started else None)
        for end, ending, result in zip(ends, endings, commit.ended, strict=True):
            self._failed.pop(end.turn_id, None)
            ending.settle(result)
        return commit.refused

    async def _write(self, batch: list[Event]) -> set[str]:
        """Store ``batch``, retried; returns the turns whose events were refused (they already ended)."""
        retrying = AsyncRetrying(
            stop=stop_after_attempt(len(RETRY_DELAYS) + 1),
            wait=wait_chain(*(wait_fixed(seconds) for seconds in RETRY_DELAYS)),
            reraise=True,
        )
        try:
            return await retrying(self.store.append_events, batch)
        except Exception as exc:
            # Followers still get them live; each turn's final commit retries its own.
            log.error("could not store %d events: %s", len(batch), exc)
            for event in batch:
                self._failed[event.turn_id].append(event)
            return set()

    async def close(self) -> None:
        """Stop storing; whoever still waits on a start, an end or a flush learns it (never waits on)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        cut_short = self._batch
        self._batch = []
        while not self._queue.empty():
            cut_short.append(self._queue.get_nowait())
        for item in cut_short:
            if isinstance(item, _Awaited):
                item.settle(JournalClosed())
            else:
                self._failed[item[0].turn_id].append(item[0])
            self._queue.task_done()
