"""A turn process: runs the engine of the turns its Fleet process hands it (``python -m
fleet_rlm.service.turns.processes.child FD NICENESS``, FD its end of the socket pair). It keeps nothing of its
own: the turn's sandboxes, files, events and commit stay with the Fleet process. It ends when that
process closes the connection (or dies)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

from fleet_rlm.engine.turn import Turn, TurnOutcome, build_turn
from fleet_rlm.protocol.events import Event
from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.sandbox.tool_calls import ToolError
from fleet_rlm.service.turns.processes.order import TurnOrder
from fleet_rlm.service.turns.processes.remote import RemoteBackend, RemoteProposals
from fleet_rlm.service.turns.processes.wire import Call, Notice, Peer, PeerGone

log = logging.getLogger(__name__)

OBSERVER_METHODS = frozenset({"output", "tool_started", "tool_finished", "warning"})


class TurnProcess:
    def __init__(self, connection: Connection) -> None:
        self.peer = Peer(connection, self._on_call, self._on_notice, self._on_closed, name="turn-process")
        self.loop = asyncio.get_running_loop()
        self.turns: dict[str, tuple[Turn, RemoteBackend]] = {}
        self._closed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        self.peer.start()
        with contextlib.suppress(PeerGone):  # the Fleet process stopped while this one started
            self.peer.notify("ready", "", os.getpid())
        await self._closed.wait()

    def _on_closed(self) -> None:
        self.loop.call_soon_threadsafe(self._closed.set)

    def _on_notice(self, notice: Notice) -> None:
        if notice.kind == "run":
            self.loop.call_soon_threadsafe(self._start, notice.args[0])
        elif notice.kind == "cancel":  # on the loop, so after the turn it cancels started
            self.loop.call_soon_threadsafe(self._cancel, notice.turn_id)
        elif notice.kind == "observe":
            found = self.turns.get(notice.turn_id)
            sandbox_id, method, args = notice.args
            sandbox = found[1].sandbox(sandbox_id) if found is not None else None
            if sandbox is not None and method in OBSERVER_METHODS:  # else a late report: dropped
                getattr(sandbox.observer, method)(*args)

    def _cancel(self, turn_id: str) -> None:
        found = self.turns.get(turn_id)
        if found is not None:  # interrupting calls the Fleet process: not on the reading thread
            threading.Thread(target=found[0].cancel, daemon=True).start()

    def _on_call(self, call: Call) -> Any:
        if call.kind != "tool":
            raise ValueError(f"a turn process answers no {call.kind!r} call")
        found = self.turns.get(call.turn_id)
        sandbox_id, execution, name, args, kwargs = call.args
        sandbox = found[1].sandbox(sandbox_id) if found is not None else None
        if sandbox is None:
            raise ToolError("host tools can only be called while an execution is running")
        return sandbox.serve_tool(execution, name, args, kwargs)

    def _start(self, order: TurnOrder) -> None:
        try:
            self._begin(order)
        except Exception as exc:  # the turn cannot start here (its workspace is unusable, say): it ends
            log.exception("turn %s could not start in its turn process", order.request.turn_id)
            self.turns.pop(order.request.turn_id, None)
            outcome = TurnOutcome(status=TurnStatus.FAILED, error=f"server error: {type(exc).__name__}: {exc}")
            with contextlib.suppress(PeerGone):
                self.peer.notify("done", order.request.turn_id, outcome)

    def _begin(self, order: TurnOrder) -> None:
        turn_id = order.request.turn_id
        backend = RemoteBackend(self.peer, turn_id, order.backend_name, order.isolated, order.execution_instructions)
        proposals = RemoteProposals(self.peer, turn_id) if order.remembers else None
        request = dataclasses.replace(order.request, propose_memory=proposals)
        turn = build_turn(order.settings, request, self._sink(turn_id), backend=backend)
        self.turns[turn_id] = (turn, backend)
        task = asyncio.create_task(self._run(turn_id, turn), name=f"turn-{turn_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, turn_id: str, turn: Turn) -> None:
        try:
            outcome = await turn.run()
        except Exception as exc:
            log.exception("turn %s failed in its turn process", turn_id)
            outcome = TurnOutcome(status=TurnStatus.FAILED, error=f"server error: {type(exc).__name__}: {exc}")
        finally:
            self.turns.pop(turn_id, None)
        with contextlib.suppress(PeerGone):
            self.peer.notify("done", turn_id, outcome)

    def _sink(self, turn_id: str) -> Any:
        def send(event: Event) -> None:
            with contextlib.suppress(PeerGone):
                self.peer.notify("event", turn_id, event)

        return send


async def _serve(fd: int) -> None:
    await TurnProcess(Connection(fd)).serve()


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("FLEET_TURN_PROCESS_LOG_LEVEL", "WARNING"),
        format=f"turn process {os.getpid()}: %(levelname)s %(name)s: %(message)s",
    )
    fd, niceness = int(sys.argv[1]), int(sys.argv[2])
    os.nice(niceness)
    # Ctrl-C or a service manager's SIGTERM to the whole group is the Fleet process's to handle (it
    # drains its turns); a turn process ends when that process closes the connection, or dies.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    asyncio.run(_serve(fd))
    os._exit(0)  # the engine's abandoned threads (a cancelled model wait) must not keep it alive


if __name__ == "__main__":
    main()
