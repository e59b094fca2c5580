"""Keeping this process's claims on its turns, and ending the turns of runners that stopped keeping theirs.

Every turn a process runs is held under a lease (``worker.lease_seconds``) that it renews every third
of it; the renewal also brings back the cancels other processes asked for, and the turns it no longer
holds (another process ended them when the lease lapsed: the database was out of this process's
reach for longer than a lease), which this process then stops without storing anything more of
them. Every serving process (API replica or worker) also looks for turns whose lease lapsed, a fifth
of a lease apart, and ends them ``interrupted`` with a terminal event, so a worker killed mid-turn
leaves no turn running for longer than a lease and a fifth, and its session takes new turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection

from fleet_rlm.logs import FailureLog
from fleet_rlm.store import Interrupting, Store, TurnRecord

log = logging.getLogger(__name__)

LAPSED_REASON = "the process running the turn stopped renewing its claim on it (it died or lost the database)"


class LeaseKeeper:
    def __init__(
        self,
        store: Store,
        runner: str,
        lease_seconds: float,
        running: Callable[[], Collection[str]],
        cancel: Callable[[str], None],
        interrupted: Callable[[TurnRecord], None],
        lost: Callable[[str], None],
    ) -> None:
        self.store = store
        self.runner = runner
        self.lease_seconds = lease_seconds
        self._running = running
        self._cancel = cancel
        self._interrupted = interrupted
        self._lost = lost
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweep_failures = FailureLog(log, "ending turns whose lease lapsed")
        self._renew_failures = FailureLog(log, "renewing this process's turn leases")

    def start(self, *, renew: bool) -> None:
        """Sweep for lapsed leases; with ``renew`` (the process runs turns) also keep its own."""
        sweep = self._every(self.lease_seconds / 5, self.sweep, self._sweep_failures)
        self._tasks.add(asyncio.create_task(sweep, name="lease-sweep"))
        if renew:
            renewal = self._every(self.lease_seconds / 3, self.renew, self._renew_failures)
            self._tasks.add(asyncio.create_task(renewal, name="lease-renew"))

    def renew_now(self, _payload: str = "") -> None:
        """Renew (and so look for cancels) at once: a cancel was asked somewhere. What was asked is read
        from the database, never taken from the notification."""
        task = asyncio.create_task(self._guarded(self.renew, self._renew_failures), name="lease-renew-now")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def renew(self) -> None:
        renewal = await self.store.renew_leases(self.runner, list(self._running()), self.lease_seconds)
        for turn_id in renewal.cancelled:
            self._cancel(turn_id)
        for turn_id in renewal.lost:
            self._lost(turn_id)

    async def sweep(self) -> None:
        """End the turns whose lease lapsed, except those this process runs: it renews their leases
        itself (a lease of its own lapses only when its event loop stood still longer than a lease)."""
        choice = Interrupting(lease_lapsed=True, sparing=set(self._running()))
        for turn in await self.store.interrupt_turns(choice, LAPSED_REASON):
            log.warning(
                "turn %s of session %s: its runner %s let its lease lapse", turn.id, turn.session_id, turn.runner
            )
            self._interrupted(turn)

    @classmethod
    async def _every(cls, seconds: float, step: Callable[[], Awaitable[None]], failures: FailureLog) -> None:
        while True:
            await asyncio.sleep(seconds)
            await cls._guarded(step, failures)

    @staticmethod
    async def _guarded(step: Callable[[], Awaitable[None]], failures: FailureLog) -> None:
        try:
            await step()
        except Exception:
            failures.failed()
        else:
            failures.succeeded()

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
