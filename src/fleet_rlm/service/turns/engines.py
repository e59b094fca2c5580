"""Where a turn's engine runs: on threads of this process, or in one of its turn processes
(``worker.turn_processes``, :mod:`fleet_rlm.service.turns.processes`), which keeps the engine's CPU
off this process's event loop. Either way the turn's sandboxes, files, events and commit are this
process's."""

from __future__ import annotations

import abc
from typing import Protocol

from fleet_rlm.config import Settings
from fleet_rlm.engine.turn import Turn, TurnOutcome, TurnRequest, build_turn
from fleet_rlm.protocol.events import EventSink
from fleet_rlm.sandbox.base import SandboxBackend


class RunningTurn(Protocol):
    lost: bool
    """True once the turn ended without its engine's last events (its turn process died)."""

    def cancel(self) -> None: ...

    async def run(self) -> TurnOutcome: ...


class TurnEngine(abc.ABC):
    """A place to run turns' engines. One required method: :meth:`begin`."""

    @abc.abstractmethod
    async def begin(
        self, settings: Settings, request: TurnRequest, sink: EventSink, backend: SandboxBackend
    ) -> RunningTurn:
        """A turn ready to :meth:`RunningTurn.run` (nothing runs before), making its sandboxes with
        ``backend`` and sending its events to ``sink``."""

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


class ThreadedTurn:
    """A turn on this process's threads."""

    lost = False

    def __init__(self, turn: Turn) -> None:
        self._turn = turn

    def cancel(self) -> None:
        self._turn.cancel()

    async def run(self) -> TurnOutcome:
        return await self._turn.run()


class OwnThreads(TurnEngine):
    async def begin(
        self, settings: Settings, request: TurnRequest, sink: EventSink, backend: SandboxBackend
    ) -> RunningTurn:
        return ThreadedTurn(build_turn(settings, request, sink, backend=backend))
