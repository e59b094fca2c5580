"""Reads of stored events for the streams of turns other processes run, made together.

An API replica follows every turn a worker runs from the store: a notification names the turns that
stored events, and each of their streams reads what it has not sent yet. A worker's group commit
names dozens of turns at once; each stream reading alone made dozens of reads at once (the largest
part of a replica's event loop under load, its streams queued for connections). Here the readings
asked for while one read runs are made together in the next (:meth:`Store.turns_and_events`); a
lone reading is read at once, so nothing waits for a timer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Sequence
from typing import Protocol

from fleet_rlm.protocol.events import Event
from fleet_rlm.store import NotFound, TurnRecord

MAX_READINGS = 100
"""The most readings one read makes (at most this many times the per-reading limit of events); more
wait for the next."""
READ_TIMEOUT_SECONDS = 30.0
"""How long one read may take before its readers hear it failed (a hung connection stalls no stream
for longer)."""
MAX_SEQ = 2**31 - 1
"""The largest seq a turn's event can have (the column is a 32-bit integer)."""

Read = tuple[TurnRecord, list[Event]]


class ReadsMany(Protocol):
    """What reads many readings at once: the store."""

    def turns_and_events(
        self, readings: Sequence[tuple[str, int]], *, limit: int
    ) -> Awaitable[list[Read | NotFound]]: ...


class StoredReadsClosed(RuntimeError):
    """The service is stopping: the store is no longer read for streams."""


class StoredReads:
    def __init__(self, store: ReadsMany, *, limit: int) -> None:
        self.store = store
        self.limit = limit
        """The most events one reading returns (a late reader of a long turn reads it in parts)."""
        self._waiting: list[_Reading] = []
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def read(self, turn_id: str, after_seq: int) -> Read:
        """The turn and its first :attr:`limit` events after ``after_seq``, as :meth:`Store.turns_and_events`
        reads them (the turn first); raises NotFound, the read's error, or StoredReadsClosed."""
        if self._closed:
            raise StoredReadsClosed("the server is stopping")
        # No event has a seq beyond the column's range: reading after it finds none, as reading after
        # the largest does (a larger number would fail the whole statement, every reading in it).
        reading = _Reading(turn_id, min(after_seq, MAX_SEQ), asyncio.get_running_loop().create_future())
        self._waiting.append(reading)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._read_batches(), name="stored-reads")
        turn, events = await reading.answer
        if after_seq <= MAX_SEQ:
            return turn, events
        # SQLite holds a seq past the range (imported before archives were checked): read after the
        # largest, it comes back each time; dropped, so a stream past it ends rather than repeats.
        return turn, [event for event in events if event.seq > after_seq]

    async def close(self) -> None:
        """Stop reading (before the store closes): the read under way and every reader still waiting are
        cancelled."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # its readers hear the rest
                await self._task
        self._answer_the_rest(StoredReadsClosed("the server is stopping"))

    async def _read_batches(self) -> None:
        batch: list[_Reading] = []
        try:
            while self._waiting:
                waiting = [reading for reading in self._waiting if not reading.answer.done()]  # gone: not read
                batch, self._waiting = waiting[:MAX_READINGS], waiting[MAX_READINGS:]
                if not batch:
                    continue
                answers: list[Read | NotFound] | None = None
                try:
                    async with asyncio.timeout(READ_TIMEOUT_SECONDS):
                        answers = await self.store.turns_and_events(
                            [(reading.turn_id, reading.after_seq) for reading in batch], limit=self.limit
                        )
                except Exception as exc:  # the database is gone, say: each reader hears it
                    for reading in batch:
                        reading.deliver(exc)
                if answers is not None:
                    for reading, answer in zip(batch, answers, strict=True):
                        reading.deliver(answer)
                batch = []
        finally:  # cut short (closed, or a bug): no reader may wait for a read that will not come
            cut_short = StoredReadsClosed("the server is stopping" if self._closed else "the read was cut short")
            for reading in batch:
                reading.deliver(cut_short)
            self._answer_the_rest(cut_short)

    def _answer_the_rest(self, error: BaseException) -> None:
        waiting, self._waiting = self._waiting, []
        for reading in waiting:
            reading.deliver(error)


class _Reading:
    def __init__(self, turn_id: str, after_seq: int, answer: asyncio.Future[Read]) -> None:
        self.turn_id = turn_id
        self.after_seq = after_seq
        self.answer = answer

    def deliver(self, answer: Read | NotFound | BaseException) -> None:
        if self.answer.done():  # its reader went away
            return
        if isinstance(answer, BaseException):
            self.answer.set_exception(answer)
        else:
            self.answer.set_result(answer)
