"""Claiming queued turns for this process to run, up to its share (``server.max_running_turns``).

A process that runs turns (``fleet worker``, and ``fleet serve`` unless ``worker.in_server`` is off
on PostgreSQL) claims the oldest queued turns whenever it has room, as many as it has room for (at
most :data:`CLAIM_BATCH`) in one transaction: when it is told a turn was queued (a notification, or
directly for a turn submitted here), when one of its turns ends, and every second regardless.
Draining (SIGTERM) stops the claiming; what it runs finishes.

A process that lives only as long as its caller (``fleet mcp``, ``fleet eval run``, ``fleet optimize``)
does not serve the queue: it claims only the turns it queued itself for want of room. Turns of other
clients it would cut short when its caller leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from fleet_rlm.logs import FailureLog
from fleet_rlm.store import Claimed, Store

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
CLAIM_BATCH = 32
"""At most this many turns claimed in one transaction (a process without a limit claims on)."""


class TurnWorker:
    def __init__(
        self,
        store: Store,
        runner: str,
        capacity: int | None,
        lease_seconds: float,
        run: Callable[[Claimed], None],
        affinity_seconds: float = 0.0,
        *,
        serves_queue: bool = True,
    ) -> None:
        self.store = store
        self.runner = runner
        self.capacity = capacity
        self.lease_seconds = lease_seconds
        self.affinity_seconds = affinity_seconds
        """How long a turn whose session's kernel another runner keeps is left to that runner."""
        self._run = run
        self.held = 0
        """Turns this process runs or is about to run."""
        self.draining = False
        self._own: set[str] | None = None if serves_queue else set()
        """Without ``serves_queue``: the turns queued here that wait for this process's room."""
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failures = FailureLog(log, "claiming queued turns")

    def start(self) -> None:
        self._task = asyncio.create_task(self._claim_loop(), name="turn-worker")

    def wake(self, _payload: str = "") -> None:
        self._wakeup.set()

    def queued_here(self, turn_id: str) -> None:
        """A turn submitted here was queued for want of room: claim it when room comes (a worker that
        serves the queue claims the oldest queued turns, this one among them)."""
        if self._own is not None:
            self._own.add(turn_id)
        self.wake()

    def reserve(self) -> bool:
        """Take room for one turn now (False: full, or draining); :meth:`release` gives it back."""
        return self._reserve_up_to(1) == 1

    def _reserve_up_to(self, wanted: int) -> int:
        """Take room for up to ``wanted`` turns now; returns how many (0: full, or draining)."""
        if self.draining:
            return 0
        room = wanted if self.capacity is None else max(0, min(wanted, self.capacity - self.held))
        self.held += room
        return room

    def release(self) -> None:
        self.held -= 1
        self.wake()

    async def _claim_loop(self) -> None:
        while not self.draining:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), POLL_SECONDS)
            self._wakeup.clear()
            try:
                await self._claim_while_room()
            except Exception:
                self._failures.failed()
            else:
                self._failures.succeeded()

    async def _claim_while_room(self) -> None:
        while room := self._reserve_up_to(CLAIM_BATCH):
            started = 0
            try:
                claimed = await self._claim(room)
                if self.draining and claimed:  # SIGTERM came during the claim: others may run them
                    await self.store.unclaim_turns(self.runner, [c.turn.id for c in claimed])
                    return
                for turn in claimed:
                    if self._start(turn):
                        started += 1  # the room is the turn's now: released when it ends
            finally:
                self.held -= room - started
            if len(claimed) < room:
                return

    async def _claim(self, room: int) -> list[Claimed]:
        if self._own is None:
            return await self.store.claim_turns(
                self.runner, self.lease_seconds, limit=room, affinity_seconds=self.affinity_seconds
            )
        if self._own:
            self._own &= await self.store.still_queued(sorted(self._own))  # not ended, nor run elsewhere
        claimed = await self.store.claim_turns(
            self.runner, self.lease_seconds, limit=room, turn_ids=self._own, affinity_seconds=self.affinity_seconds
        )
        self._own -= {c.turn.id for c in claimed}
        return claimed

    def _start(self, claimed: Claimed) -> bool:
        """Run a claimed turn; a turn whose start fails (a bug) keeps its claim until its lease lapses
        (it then ends interrupted) and the turns claimed with it still run."""
        try:
            self._run(claimed)
        except Exception:
            log.exception("turn %s: could not start it", claimed.turn.id)
            return False
        return True

    async def drain(self) -> None:
        """Stop claiming (the turns it runs go on)."""
        self.draining = True
        self.wake()
        if self._task is not None:
            await self._task  # ends after the claim it is making, if any
            self._task = None
