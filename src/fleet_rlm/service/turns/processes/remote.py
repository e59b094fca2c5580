"""In a turn process: the sandboxes a turn's engine uses, which live in the Fleet process running the
turn (its pool, its session kernels). Each method is a call to that process; sandbox code's tool calls
come back here and run on the tools of the execution that made them, in its context (DSPy's settings
included); what a sandbox reports (output, tool calls) reaches the observer the engine gave it."""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleet_rlm.engine.memory import Proposal
from fleet_rlm.sandbox.base import SandboxBackend, SandboxLimits, SandboxSpec
from fleet_rlm.sandbox.output import GuardedObserver
from fleet_rlm.sandbox.tool_calls import ToolError, invoke
from fleet_rlm.sandbox.volume import Volume
from fleet_rlm.service.turns.processes.wire import CrossedError, Peer, PeerGone


class RemoteSandbox:
    def __init__(self, peer: Peer, turn_id: str, sandbox_id: str, spec: SandboxSpec, isolated: bool) -> None:
        self.tools: dict[str, Callable[..., Any]] = {}
        self.output_fields: list[dict[str, Any]] | None = None
        self.sandbox_id = sandbox_id
        self._peer = peer
        self._turn_id = turn_id
        self._spec = spec
        self._isolated = isolated
        self.observer = GuardedObserver(spec.observer)
        """Where the Fleet process's reports on this sandbox go (a failure is logged, not raised)."""
        self._executions = itertools.count(1)
        self._serving: tuple[int, dict[str, Callable[..., Any]], contextvars.Context] | None = None

    @property
    def spec(self) -> SandboxSpec:
        return self._spec

    @property
    def isolated(self) -> bool:
        return self._isolated

    @property
    def usable(self) -> bool:
        try:
            return bool(self._call("usable"))
        except PeerGone:
            return False

    def start(self) -> None:
        self._call("start")

    def execute(self, code: str, variables: dict[str, Any] | None = None) -> Any:
        tools = dict(self.tools)
        execution = next(self._executions)
        self._serving = (execution, tools, contextvars.copy_context())
        try:
            return self._call("execute", execution, code, variables, list(tools), self.output_fields)
        finally:
            self._serving = None

    def serve_tool(self, execution: int, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Run one tool call the sandbox code of ``execution`` made (on the calling thread, in that
        execution's context); a failure is raised as the text the sandbox code sees."""
        serving = self._serving
        if serving is None or serving[0] != execution:
            raise ToolError("host tools can only be called while an execution is running")
        _, tools, context = serving
        try:
            return context.copy().run(invoke, tools, name, args, kwargs)
        except (ToolError, CrossedError) as exc:
            raise ToolError(str(exc)) from exc
        except BaseException as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc

    def interrupt(self) -> None:
        with contextlib.suppress(PeerGone):
            self._call("interrupt")

    def shutdown(self) -> None:
        with contextlib.suppress(PeerGone):
            self._call("shutdown")

    def _call(self, operation: str, *args: Any) -> Any:
        return self._peer.call("sandbox", self._turn_id, self.sandbox_id, operation, *args)


class RemoteBackend(SandboxBackend):
    """The backend of one turn in a turn process: sandboxes are made by the lease's backend in the
    Fleet process (the pre-started one, the session's kernel, cold ones for child agents)."""

    def __init__(self, peer: Peer, turn_id: str, name: str, isolated: bool, instructions: str) -> None:
        self.name = name
        self._peer = peer
        self._turn_id = turn_id
        self._isolated = isolated
        self._instructions = instructions
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.sandboxes: dict[str, RemoteSandbox] = {}

    @property
    def execution_instructions(self) -> str:
        return self._instructions

    @property
    def isolated(self) -> bool:
        return self._isolated

    def create(self, spec: SandboxSpec) -> RemoteSandbox:
        # Known here before it exists there: a kept kernel may report output as soon as it is handed out.
        sandbox = RemoteSandbox(self._peer, self._turn_id, f"s{next(self._ids)}", spec, self._isolated)
        with self._lock:
            self.sandboxes[sandbox.sandbox_id] = sandbox
        crossing = SandboxSpec(spec.workspace, spec.limits, dict(spec.labels))  # the observer stays here
        try:
            self._peer.call("create", self._turn_id, sandbox.sandbox_id, crossing)
        except BaseException:
            with self._lock:
                self.sandboxes.pop(sandbox.sandbox_id, None)
            raise
        return sandbox

    def workspace_volume(self, directory: Path, limits: SandboxLimits) -> Volume:
        volume: Volume = self._peer.call("volume", self._turn_id, directory, limits)
        return volume

    def sandbox(self, sandbox_id: str) -> RemoteSandbox | None:
        with self._lock:
            return self.sandboxes.get(sandbox_id)


class RemoteProposals:
    """``remember`` of a turn in a turn process: checked and stored by the Fleet process."""

    def __init__(self, peer: Peer, turn_id: str) -> None:
        self._peer = peer
        self._turn_id = turn_id

    def __call__(self, text: str, why: str) -> Proposal:
        proposal: Proposal = self._peer.call("remember", self._turn_id, text, why)
        return proposal
