"""In the Fleet process: the sandboxes of one turn whose engine runs in a turn process.

The lease's backend makes them here (so the pool, the session kernel and the sandboxes' limits are
this process's, as for a turn on its own threads); the turn process drives them by calls. The tools
sandbox code calls are forwarders to the turn process, and what a sandbox reports is forwarded there
to the observer the engine gave it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dspy.primitives import CodeInterpreterError

from fleet_rlm.engine.memory import ProposeMemory
from fleet_rlm.protocol.payloads import OutputStream
from fleet_rlm.sandbox.base import Sandbox, SandboxBackend, SandboxLimits, SandboxSpec
from fleet_rlm.sandbox.volume import Volume
from fleet_rlm.service.turns.processes.wire import Peer, PeerGone

SANDBOX_OPERATIONS = frozenset({"usable", "start", "execute", "interrupt", "shutdown"})


class ForwardingObserver:
    """A sandbox's observer here: each report goes to the turn process, in order."""

    def __init__(self, peer: Peer, turn_id: str, sandbox_id: str) -> None:
        self._peer = peer
        self._turn_id = turn_id
        self._sandbox_id = sandbox_id

    def _forward(self, method: str, *args: Any) -> None:
        with contextlib.suppress(PeerGone):
            self._peer.notify("observe", self._turn_id, self._sandbox_id, method, args)

    def output(self, stream: OutputStream, text: str) -> None:
        self._forward("output", stream, text)

    def tool_started(self, call_id: str, name: str, arguments: str) -> None:
        self._forward("tool_started", call_id, name, arguments)

    def tool_finished(self, call_id: str, name: str, duration: float, error: str | None) -> None:
        self._forward("tool_finished", call_id, name, duration, error)

    def warning(self, message: str) -> None:
        self._forward("warning", message)


class HostedTurn:
    def __init__(self, peer: Peer, turn_id: str, backend: SandboxBackend, proposals: ProposeMemory | None) -> None:
        self.peer = peer
        self.turn_id = turn_id
        self.backend = backend
        self.proposals = proposals
        self._sandboxes: dict[str, Sandbox] = {}
        self._volumes: list[Volume] = []
        self._lock = threading.Lock()
        self._ended = False

    def answer(self, kind: str, args: tuple[Any, ...]) -> Any:
        """Answer one call of the turn's engine (on a thread of its own)."""
        if kind == "create":
            return self._create(*args)
        if kind == "volume":
            return self._volume(*args)
        if kind == "remember":
            if self.proposals is None:
                raise CodeInterpreterError("this turn has no remember tool")
            return self.proposals(*args)
        if kind == "sandbox":
            sandbox_id, operation, *rest = args
            if operation not in SANDBOX_OPERATIONS:
                raise CodeInterpreterError(f"no sandbox operation {operation!r}")
            sandbox = self._sandbox(sandbox_id)
            if operation == "execute":
                return self._execute(sandbox_id, sandbox, *rest)
            if operation == "usable":
                return sandbox.usable
            getattr(sandbox, operation)()
            return None
        raise CodeInterpreterError(f"a Fleet process answers no {kind!r} call")

    def interrupt_all(self) -> None:
        """Kill what runs in every sandbox of the turn (a cancel, or its turn process is gone); no
        sandbox is made for it afterwards."""
        with self._lock:
            self._ended = True
            sandboxes = list(self._sandboxes.values())
        for sandbox in sandboxes:
            sandbox.interrupt()

    def _create(self, sandbox_id: str, spec: SandboxSpec) -> None:
        with self._lock:
            if self._ended:
                raise CodeInterpreterError("the turn was cancelled")
            if sandbox_id in self._sandboxes:
                raise CodeInterpreterError(f"turn {self.turn_id} already has a sandbox {sandbox_id}")
        observed = SandboxSpec(
            spec.workspace, spec.limits, spec.labels, ForwardingObserver(self.peer, self.turn_id, sandbox_id)
        )
        sandbox = self.backend.create(observed)
        with self._lock:
            self._sandboxes[sandbox_id] = sandbox
            ended = self._ended
        if ended:
            sandbox.interrupt()

    def _volume(self, directory: Path, limits: SandboxLimits) -> Volume:
        volume = self.backend.workspace_volume(directory, limits)
        with self._lock:
            self._volumes.append(volume)
        return volume

    def release_volumes(self) -> None:
        """Release the child agents' workspace volumes made for the turn (its turn process died before
        it could); releasing one twice does no harm."""
        with self._lock:
            volumes, self._volumes = self._volumes, []
        for volume in volumes:
            volume.release()

    def _execute(
        self,
        sandbox_id: str,
        sandbox: Sandbox,
        execution: int,
        code: str,
        variables: dict[str, Any] | None,
        tool_names: list[str],
        output_fields: list[dict[str, Any]] | None,
    ) -> Any:
        sandbox.tools = {name: self._forwarder(sandbox_id, execution, name) for name in tool_names}
        sandbox.output_fields = output_fields
        return sandbox.execute(code, variables)

    def _forwarder(self, sandbox_id: str, execution: int, name: str) -> Callable[..., Any]:
        def call_in_turn_process(*args: Any, **kwargs: Any) -> Any:
            return self.peer.call("tool", self.turn_id, sandbox_id, execution, name, list(args), kwargs)

        call_in_turn_process.__name__ = name
        return call_in_turn_process

    def _sandbox(self, sandbox_id: str) -> Sandbox:
        with self._lock:
            found = self._sandboxes.get(sandbox_id)
        if found is None:
            raise CodeInterpreterError(f"no sandbox {sandbox_id} in turn {self.turn_id}")
        return found
