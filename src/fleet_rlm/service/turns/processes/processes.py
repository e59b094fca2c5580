"""The turn processes of a Fleet process that runs turns (``worker.turn_processes``).

Each is a long-lived Python process (started once, so a turn pays no interpreter or DSPy start-up)
that runs the engines of several turns on its threads; a turn goes to the one running the fewest.
They run at a lower CPU priority (:data:`NICENESS`), so this process's event loop (events to
followers and the database, leases, claims) is served first. A turn process that dies fails its
turns (their sandboxes are killed here) and is replaced; one that has not ended a turn 30 s past its
deadline is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any

from fleet_rlm.config import Settings
from fleet_rlm.engine.turn import TurnOutcome, TurnRequest
from fleet_rlm.protocol.events import Event, EventSink
from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.sandbox.base import SandboxBackend
from fleet_rlm.service.turns.engines import RunningTurn, TurnEngine
from fleet_rlm.service.turns.processes.host import HostedTurn
from fleet_rlm.service.turns.processes.order import TurnOrder
from fleet_rlm.service.turns.processes.wire import Call, Notice, Peer, PeerGone

log = logging.getLogger(__name__)

CHILD_MODULE = "fleet_rlm.service.turns.processes.child"
"""What a turn process runs (``python -m``): how a process listing tells one."""
NICENESS = 5
"""How much lower a turn process's CPU priority is than its Fleet process's."""
READY_TIMEOUT = 60.0
READY_POLL = 0.02
CANCEL_GRACE = 2.0
"""After a cancel, how long the turn process has to stop the turn before its sandboxes are killed here."""
RESPAWN_DELAY = 5.0
"""How long after a turn process died before it was ready another is started."""
WEDGED_GRACE = 30.0
"""Past a turn's deadline, how long its turn process may take to end it before it is killed."""


class TurnProcessGone(RuntimeError):
    pass


class ChildProcess:
    """One turn process, and the turns it runs."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_gone: Any) -> None:
        self.loop = loop
        self._on_gone = on_gone
        ours, theirs = socket.socketpair()
        with ours, theirs:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-P",
                    "-m",
                    CHILD_MODULE,
                    str(theirs.fileno()),
                    str(NICENESS),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
            connection = Connection(ours.detach())
        self.peer = Peer(
            connection, self._on_call, self._on_notice, self._on_closed, name=f"turn process {self.process.pid}"
        )
        self.turns: dict[str, RemoteTurn] = {}
        self.ready = asyncio.Event()
        self.gone = False
        self.peer.start()

    def __repr__(self) -> str:
        return f"turn process {self.process.pid}"

    def _on_call(self, call: Call) -> Any:
        turn = self.turns.get(call.turn_id)
        if turn is None:
            raise TurnProcessGone(f"turn {call.turn_id} is not running")
        return turn.hosted.answer(call.kind, call.args)

    def _on_notice(self, notice: Notice) -> None:
        if notice.kind == "ready":
            self.loop.call_soon_threadsafe(self.ready.set)
            return
        turn = self.turns.get(notice.turn_id)
        if turn is None:
            return
        if notice.kind == "event":
            event: Event = notice.args[0]
            turn.sink(event)
        elif notice.kind == "done":
            outcome: TurnOutcome = notice.args[0]
            self.loop.call_soon_threadsafe(turn.finished, outcome)

    def _on_closed(self) -> None:
        self.gone = True
        try:
            status = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            status = None
        reason = f"exit status {status}" if status is not None else "its connection closed"
        for turn in list(self.turns.values()):
            turn.hosted.interrupt_all()
            self.loop.call_soon_threadsafe(turn.lose, reason)
        with contextlib.suppress(RuntimeError):  # the loop already closed
            self.loop.call_soon_threadsafe(self._on_gone, self, reason)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()

    async def stop(self) -> None:
        self.peer.close()  # the turn process ends when its connection does
        try:
            await asyncio.to_thread(self.process.wait, 10)
        except subprocess.TimeoutExpired:
            self.kill()
            await asyncio.to_thread(self.process.wait)


class RemoteTurn:
    """A turn whose engine runs in a turn process."""

    def __init__(
        self, child: ChildProcess, settings: Settings, request: TurnRequest, sink: EventSink, backend: SandboxBackend
    ) -> None:
        self.child = child
        self.sink = sink
        self.lost = False
        self.turn_id = request.turn_id
        self.hosted = HostedTurn(child.peer, request.turn_id, backend, request.propose_memory)
        self._order = TurnOrder(
            settings=settings,
            request=dataclasses.replace(request, propose_memory=None),
            backend_name=backend.name,
            isolated=backend.isolated,
            execution_instructions=backend.execution_instructions,
            remembers=request.propose_memory is not None,
        )
        self._deadline = (request.turn_timeout or settings.budget.turn_timeout) + WEDGED_GRACE
        self._done: asyncio.Future[TurnOutcome] = child.loop.create_future()
        self._sent = False
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True
        if not self._sent or self._done.done():
            return
        with contextlib.suppress(PeerGone):
            self.child.peer.notify("cancel", self.turn_id)
        self.child.loop.call_later(CANCEL_GRACE, self._force_stop)

    def _force_stop(self) -> None:
        if self._done.done():
            return
        log.warning("turn %s: its turn process did not stop it; its sandboxes are killed", self.turn_id)
        self.hosted.interrupt_all()
        self.child.loop.call_later(CANCEL_GRACE, self._give_up)

    def _give_up(self) -> None:
        """The turn process still has not ended the cancelled turn: it ends here, without it."""
        if self._done.done():
            return
        log.error("turn %s: its turn process ignores the cancel; the turn ends without it", self.turn_id)
        self.lost = True
        self._done.set_result(TurnOutcome(status=TurnStatus.CANCELLED, error="the turn was cancelled"))

    async def run(self) -> TurnOutcome:
        self.child.turns[self.turn_id] = self
        try:
            try:
                self.child.peer.notify("run", self.turn_id, self._order)
            except PeerGone:
                self.lose("it had ended")
            self._sent = True
            if self._cancelled:
                self.cancel()
            try:
                return await asyncio.wait_for(asyncio.shield(self._done), self._deadline)
            except TimeoutError:
                log.error("turn %s: %r has not ended it past its deadline; killing it", self.turn_id, self.child)
                self.child.kill()
                return await self._done
            except asyncio.CancelledError:
                self.cancel()
                self.hosted.interrupt_all()
                raise
        finally:
            self.child.turns.pop(self.turn_id, None)
            if self.lost:
                await asyncio.to_thread(self.hosted.release_volumes)

    def finished(self, outcome: TurnOutcome) -> None:
        if not self._done.done():
            self._done.set_result(outcome)

    def lose(self, reason: str) -> None:
        if self._done.done():
            return
        self.lost = True
        self._done.set_result(
            TurnOutcome(status=TurnStatus.FAILED, error=f"the turn's engine process ended unexpectedly ({reason})")
        )


class TurnProcesses(TurnEngine):
    def __init__(self, count: int) -> None:
        self.count = count
        self.children: list[ChildProcess] = []
        self._closing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._starting: set[asyncio.Future[None]] = set()

    async def start(self) -> None:
        """Start the turn processes; turns wait for the first of them to be ready, not this."""
        self._loop = asyncio.get_running_loop()
        self.children = [self._spawn() for _ in range(self.count)]

    def _spawn(self) -> ChildProcess:
        assert self._loop is not None
        child = ChildProcess(self._loop, self._replace)
        starting = asyncio.ensure_future(self._await_ready(child))
        self._starting.add(starting)
        starting.add_done_callback(self._starting.discard)
        return child

    async def _await_ready(self, child: ChildProcess) -> None:
        try:
            await asyncio.wait_for(child.ready.wait(), READY_TIMEOUT)
        except TimeoutError:
            log.error("%r did not start within %.0fs", child, READY_TIMEOUT)
            child.kill()

    def _replace(self, child: ChildProcess, reason: str) -> None:
        if self._closing or child not in self.children:
            return
        log.error("%r ended (%s); starting another", child, reason)
        # One that never got ready (a broken install) is not started again and again at once.
        delay = 0.0 if child.ready.is_set() else RESPAWN_DELAY
        assert self._loop is not None
        self._loop.call_later(delay, self._respawn, child)

    def _respawn(self, child: ChildProcess) -> None:
        if not self._closing and child in self.children:
            self.children[self.children.index(child)] = self._spawn()

    async def begin(
        self, settings: Settings, request: TurnRequest, sink: EventSink, backend: SandboxBackend
    ) -> RunningTurn:
        return RemoteTurn(await self._least_busy(), settings, request, sink, backend)

    async def _least_busy(self) -> ChildProcess:
        """The ready turn process running the fewest turns, once one is ready."""
        deadline = asyncio.get_running_loop().time() + READY_TIMEOUT + RESPAWN_DELAY
        while True:
            ready = [child for child in self.children if child.ready.is_set() and not child.gone]
            if ready:
                return min(ready, key=lambda child: len(child.turns))
            if self._closing or asyncio.get_running_loop().time() > deadline:
                raise TurnProcessGone("no turn process is running (the log says why)")
            await asyncio.sleep(READY_POLL)

    async def close(self) -> None:
        self._closing = True
        for starting in list(self._starting):
            starting.cancel()
        await asyncio.gather(*(child.stop() for child in self.children))
        self.children = []
