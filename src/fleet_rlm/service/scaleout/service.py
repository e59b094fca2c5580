"""What ties a serving process to the others on its database: its turns' leases (renewed, and the
lapsed ones of dead processes ended) and, on PostgreSQL, the notifications that wake its readers, its
worker and its cancels."""

from __future__ import annotations

from fleet_rlm.config import Settings
from fleet_rlm.service.scaleout.leases import LeaseKeeper
from fleet_rlm.service.turns.service import TurnService
from fleet_rlm.store import Database, Store
from fleet_rlm.store.notify import Channel, Handler, Listener


class ScaleOut:
    def __init__(self, settings: Settings, database: Database, store: Store, runner: str, turns: TurnService) -> None:
        self._settings = settings
        self._database = database
        self._store = store
        self._runner = runner
        self._turns = turns
        self._leases: LeaseKeeper | None = None
        self._listener: Listener | None = None

    def start(self, *, runs_turns: bool) -> None:
        """Keep leases (renewing this process's own when it ``runs_turns``) and listen for the others."""
        turns = self._turns
        self._leases = LeaseKeeper(
            self._store,
            self._runner,
            self._settings.worker.lease_seconds,
            turns.running,
            turns.cancel_here,
            lambda turn: turns.wakeups.wake(turn.id),
            turns.ended_elsewhere,
        )
        self._leases.start(renew=runs_turns)
        if not self._database.is_sqlite:
            handlers: dict[Channel, Handler] = {Channel.EVENTS: turns.wakeups.wake}
            if runs_turns:
                handlers[Channel.CANCEL] = self._leases.renew_now
            if turns.worker is not None:
                handlers[Channel.QUEUED] = turns.worker.wake
            self._listener = Listener(self._database, handlers, self._caught_up)
            self._listener.start()

    def _caught_up(self) -> None:
        """After the listening connection came back: whatever was missed meanwhile is looked at again."""
        self._turns.wakeups.wake_all()
        if self._turns.worker is not None:
            self._turns.worker.wake()

    async def close(self) -> None:
        if self._leases is not None:
            await self._leases.close()
        if self._listener is not None:
            await self._listener.close()
