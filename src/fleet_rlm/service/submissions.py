"""Submissions that arrive together are queued in one transaction (:meth:`Store.create_turns`).

While one batch is being stored, the submissions arriving meanwhile wait for the next; a lone
submission is stored at once, so nothing waits for a timer. Each caller gets its own answer: its turn
and whether it is new, or the error its submission alone would have raised.
"""

from __future__ import annotations

import asyncio
import contextlib

from fleet_rlm.store import NewTurn, Store, TurnRecord

MAX_BATCH = 200


class SubmissionQueue:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._waiting: list[tuple[NewTurn, asyncio.Future[tuple[TurnRecord, bool] | Exception]]] = []
        self._task: asyncio.Task[None] | None = None

    async def create(self, new: NewTurn) -> tuple[TurnRecord, bool]:
        """Queue ``new`` with whatever else is submitted meanwhile; its turn and whether it is new."""
        answer: asyncio.Future[tuple[TurnRecord, bool] | Exception] = asyncio.get_running_loop().create_future()
        item = (new, answer)
        self._waiting.append(item)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._store_batches(), name="submissions")
        try:
            result = await asyncio.shield(answer)
        except asyncio.CancelledError:
            with contextlib.suppress(ValueError):
                self._waiting.remove(item)  # not taken yet: never stored
            raise
        if isinstance(result, Exception):
            raise result
        return result

    async def close(self) -> None:
        """Wait for the batch being stored, if any."""
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._task

    async def _store_batches(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
            try:
                answers = await self.store.create_turns([new for new, _ in batch])
            except asyncio.CancelledError:
                for _, answer in batch:
                    answer.cancel()
                raise
            except Exception as exc:  # the database is gone, say: each caller hears it
                for _, answer in batch:
                    if not answer.done():
                        answer.set_exception(exc)
                continue
            for (_, answer), result in zip(batch, answers, strict=True):
                if not answer.done():
                    answer.set_result(result)
