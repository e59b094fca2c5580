"""Storing events as they come, and only then handing them to live followers.

Persist-then-publish: an event a client has seen is already in the database, so after a crash the
stored stream (closed by ``turn.interrupted`` with the next ``seq``) extends exactly what every
client saw, and reconnecting with ``Last-Event-ID`` never skips or repeats anything.

One journal serves every turn of the process (group commit): each insert takes whatever all turns
emitted while the previous insert ran, so under load the number of transactions stays flat while
the number of turns grows, and each turn's events keep their ``seq`` order. A turn's end (its status,
answer, terminal event and file changes) goes into the same group commit, after the events put before
it: the turns of a process that end together commit together, and a turn's end never waits for
events of other turns put after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from fleet_rlm.protocol.events import Event
from fleet_rlm.store import Conflict, NotFound, Store, TurnEnd, TurnRecord

log = logging.getLogger(__name__)

MAX_BATCH = 2000
RETRY_DELAYS = (0.05, 0.2, 1.0, 3.0)
Publish = Callable[[Event], None]


@dataclass
class _Ending:
    end: TurnEnd
    done: asyncio.Future[TurnRecord] = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def settle(self, result: TurnRecord | Conflict | NotFound | Exception) -> None:
        if self.done.done():  # its turn stopped waiting
            return
        if isinstance(result, Exception):
            self.done.set_exception(result)
        else:
            self.done.set_result(result)


class EventJournal:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._queue: asyncio.Queue[tuple[Event, Publish] | _Ending] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._failed: dict[str, list[Event]] = defaultdict(list)

    def put(self, event: Event, publish: Publish) -> None:
        """Store ``event`` soon, then call ``publish(event)``."""
        self._enqueue((event, publish))

    async def finish(self, end: TurnEnd) -> TurnRecord:
        """End a turn in the next group commit, after the events put before (and with those of its events
        an earlier commit could not store); returns the turn as ended once the events are published.
        Raises ``Conflict`` (it already ended) or ``NotFound``; when the commit itself fails, raises its
        error and keeps the turn's unstored events for :meth:`flush`, so its caller can retry alone."""
        ending = _Ending(end)
        self._enqueue(ending)
        return await ending.done

    def _enqueue(self, item: tuple[Event, Publish] | _Ending) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="event-journal")
        self._queue.put_nowait(item)

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            published = [item for item in batch if not isinstance(item, _Ending)]
            endings = [item for item in batch if isinstance(item, _Ending)]
            events = [event for event, _ in published]
            if endings:
                results = await self._write_ending(events, endings)
            else:
                await self._write(events)
                results = []
            for event, publish in published:
                try:
                    publish(event)
                except Exception:
                    log.exception("turn %s: publishing event %d failed", event.turn_id, event.seq)
            for ending, result in zip(endings, results, strict=True):
                ending.settle(result)
            for _ in batch:
                self._queue.task_done()

    async def _write_ending(
        self, events: list[Event], endings: list[_Ending]
    ) -> list[TurnRecord | Conflict | NotFound | Exception]:
        ends = [replace(e.end, events=[*self._failed.get(e.end.turn_id, []), *e.end.events]) for e in endings]
        try:
            results = await self.store.finish_turns(ends, events=events)
        except Exception as exc:
            log.warning(
                "could not end %d turns with %d events: %s; the events alone are retried", len(ends), len(events), exc
            )
            await self._write(events)
            return [exc for _ in endings]
        for end in ends:
            self._failed.pop(end.turn_id, None)
        return list(results)

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
        while not self._queue.empty():  # a turn still waiting to end learns it will not
            item = self._queue.get_nowait()
            if isinstance(item, _Ending):
                item.settle(RuntimeError("the server stopped storing events before the turn's end was stored"))
