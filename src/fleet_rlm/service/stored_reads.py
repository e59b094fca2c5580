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

MAX_READINGS = 500
"""The most readings one read makes; more wait for the next."""

Read = tuple[TurnRecord, list[Event]]


class ReadsMany(Protocol):
    """What reads many readings at once: the store."""

    def turns_and_events(
        self, readings: Sequence[tuple[str, int]], *, limit: int
    ) -> Awaitable[list[Read | NotFound]]: ...


class StoredReads:
    def __init__(self, store: ReadsMany, *, limit: int) -> None:
        self.store = store
        self.limit = limit
        """The most events one reading returns (a late reader of a long turn reads it in parts)."""
        self._waiting: list[_Reading] = []
        self._task: asyncio.Task[None] | None = None

    async def read(self, turn_id: str, after_seq: int) -> Read:
        """The turn and its first :attr:`limit` events after ``after_seq``, as :meth:`Store.turns_and_events`
        reads them (the turn first); raises NotFound, or the read's error."""
        reading = _Reading(turn_id, after_seq, asyncio.get_running_loop().create_future())
        self._waiting.append(reading)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._read_batches(), name="stored-reads")
        return await reading.answer

    async def close(self) -> None:
        """Stop reading (before the store closes); a reader still waiting is cancelled."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for reading in self._waiting:
            reading.answer.cancel()
        self._waiting = []

    async def _read_batches(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting[:MAX_READINGS], self._waiting[MAX_READINGS:]
            answers: list[Read | BaseException]
            try:
                found = await self.store.turns_and_events(
                    [(reading.turn_id, reading.after_seq) for reading in batch], limit=self.limit
                )
                answers = list(found)
            except asyncio.CancelledError:
                for reading in batch:
                    reading.answer.cancel()
                raise
            except Exception as exc:  # the database is gone, say: each reader hears it
                answers = [exc] * len(batch)
            for reading, answer in zip(batch, answers, strict=True):
                reading.deliver(answer)


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
