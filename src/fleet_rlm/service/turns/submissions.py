"""Submissions that arrive together are queued in one transaction (:meth:`Store.create_turns`).

While one batch is being stored, the submissions arriving meanwhile wait for the next; a lone
submission is stored at once, so nothing waits for a timer. Each caller gets its own answer: its turn
and whether it is new, or the error its submission alone would have raised. What must follow the
answer (starting a turn this process claimed, or giving its room back) is the submission's
``settle`` callback, called exactly once even when the caller was cancelled meanwhile: a turn stored
for a caller that went away still runs, as if its answer had been lost on the way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from fleet_rlm.store import NewTurn, Queued, Store

log = logging.getLogger(__name__)

MAX_BATCH = 200

Answer = Queued | BaseException
Settle = Callable[[Answer], None]


class SubmissionsClosed(RuntimeError):
    """The service is stopping: no more turns are queued."""


class SubmissionQueue:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._waiting: list[_Item] = []
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def create(self, new: NewTurn, settle: Settle = lambda _answer: None) -> Queued:
        """Queue ``new`` with whatever else is submitted meanwhile; its turn, whether it is new, and its
        session."""
        item = _Item(new, settle, asyncio.get_running_loop().create_future())
        if self._closed:
            item.deliver(SubmissionsClosed("the service is stopping"))
            raise SubmissionsClosed("the service is stopping")
        self._waiting.append(item)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._store_batches(), name="submissions")
        try:
            result = await asyncio.shield(item.answer)
        except asyncio.CancelledError:
            if item in self._waiting:  # not taken yet: never stored
                self._waiting.remove(item)
                item.deliver(asyncio.CancelledError())
            raise
        if isinstance(result, BaseException):
            raise result
        return result

    async def close(self) -> None:
        """Queue nothing more; wait for the batch being stored and answer what still waits."""
        self._closed = True
        if self._task is not None and not self._task.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)
        waiting, self._waiting = self._waiting, []
        for item in waiting:
            item.deliver(SubmissionsClosed("the service is stopping"))

    async def _store_batches(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
            answers: list[Answer]
            try:
                answers = list(await self.store.create_turns([item.new for item in batch]))
            except asyncio.CancelledError:
                for item in batch:
                    item.deliver(asyncio.CancelledError())
                raise
            except Exception as exc:  # the database is gone, say: each caller hears it
                answers = [exc] * len(batch)
            for item, answer in zip(batch, answers, strict=True):
                item.deliver(answer)


class _Item:
    def __init__(self, new: NewTurn, settle: Settle, answer: asyncio.Future[Answer]) -> None:
        self.new = new
        self.settle = settle
        self.answer = answer

    def deliver(self, answer: Answer) -> None:
        """Settle the submission (once) and answer its caller, if it still waits."""
        if self.answer.done():
            return
        try:
            self.settle(answer)
        except Exception:  # a bug: the caller still hears its answer
            log.exception("settling the submission of a turn to %s failed", self.new.session_ref)
        self.answer.set_result(answer)
