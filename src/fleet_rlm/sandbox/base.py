"""The sandbox seam: what every backend provides and what the engine observes.

A sandbox is one persistent Python worker plus one workspace directory. It implements DSPy's
``CodeInterpreter`` protocol (mutable ``tools``, ``start``/``execute``/``shutdown``,
``output_fields`` for a typed ``SUBMIT``) so that ``dspy.RLM`` runs on it unchanged. Backends
(``local`` with bubblewrap today, Daytona later) subclass :class:`SandboxBackend` and are chosen
by name in :mod:`fleet_rlm.sandbox.registry`. Every sandbox is made through a
:class:`SandboxFactory`; files move between the host and a workspace through the backend's
:class:`WorkspaceFiles`.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self

from dspy.primitives import CodeExecutionError, CodeInterpreterError

from fleet_rlm.config import BudgetSettings, SandboxSettings
from fleet_rlm.protocol.payloads import OutputStream
from fleet_rlm.sandbox.progress import Progress
from fleet_rlm.sandbox.transfer import HostDirectoryFiles, Readable
from fleet_rlm.sandbox.volume import Volume, plain_volume


@dataclass(frozen=True)
class SandboxLimits:
    memory_mb: int = 2048
    max_processes: int = 64
    max_file_size_mb: int = 1024
    cpu_seconds: int = 1800
    execution_timeout: float = 120.0
    max_output_chars: int = 20_000
    disk_mb: int = 10_240
    """What a sandbox's workspace volume holds at most, inputs included (MiB)."""
    max_files: int = 100_000
    cpu_weight: int = 10
    """What the whole sandbox weighs on a busy CPU, on cgroup v2's scale (a host process at nice 0: 100)."""

    @classmethod
    def from_settings(cls, sandbox: SandboxSettings, budget: BudgetSettings) -> SandboxLimits:
        """The sandbox section's limits, with the budget's per-execution ones."""
        return cls(
            memory_mb=sandbox.memory_mb,
            max_processes=sandbox.max_processes,
            max_file_size_mb=sandbox.max_file_size_mb,
            cpu_seconds=sandbox.cpu_seconds,
            execution_timeout=budget.execution_timeout,
            max_output_chars=budget.max_output_chars,
            disk_mb=sandbox.disk_mb,
            max_files=sandbox.max_files,
            cpu_weight=sandbox.cpu_weight,
        )


class SandboxObserver(Protocol):
    """Receives what happens inside a sandbox while code runs (called from host threads)."""

    def output(self, stream: OutputStream, text: str) -> None:
        """A chunk of stdout/stderr ("stdout" or "stderr"), as it is written."""

    def tool_started(self, call_id: str, name: str, arguments: str) -> None:
        """A host tool call began; ``arguments`` is a short preview."""

    def tool_finished(self, call_id: str, name: str, duration: float, error: str | None) -> None:
        """A host tool call ended, with an error message if it failed."""

    def warning(self, message: str) -> None:
        """Something the person should know (e.g. output was truncated)."""


class NullObserver:
    def output(self, stream: str, text: str) -> None:
        return None

    def tool_started(self, call_id: str, name: str, arguments: str) -> None:
        return None

    def tool_finished(self, call_id: str, name: str, duration: float, error: str | None) -> None:
        return None

    def warning(self, message: str) -> None:
        return None


@dataclass
class SandboxSpec:
    """What one sandbox is made of: its workspace, limits, labels and observer."""

    workspace: Path
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    labels: Mapping[str, str] = field(default_factory=dict)
    observer: SandboxObserver = field(default_factory=NullObserver)


class Sandbox(Protocol):
    """A DSPy ``CodeInterpreter`` with Fleet's extras."""

    tools: dict[str, Callable[..., Any]]
    output_fields: list[dict[str, Any]] | None

    @property
    def spec(self) -> SandboxSpec: ...

    @property
    def isolated(self) -> bool: ...

    @property
    def usable(self) -> bool:
        """Whether it can still run code: not shut down, cancelled or crashed."""
        ...

    def start(self) -> None: ...

    def execute(self, code: str, variables: dict[str, Any] | None = None) -> Any: ...

    def interrupt(self) -> None:
        """Kill whatever is running now (cancel); the sandbox is unusable afterwards."""

    def shutdown(self) -> None: ...


class WorkspaceFiles(Protocol):
    """Moving files between the host and one sandbox workspace: the seam a backend whose workspace
    is not a host directory implements. ``sandbox_rel`` is relative to the workspace root
    (``files/a.csv``). Everything in the workspace may have been written by hostile code, so a pull
    copies only a regular file and never follows a link."""

    def push(self, source: Path | Readable, sandbox_rel: str) -> int:
        """Put ``source`` (a host file, or a stream) at ``sandbox_rel``, parents made, replacing what
        was there, whole or not at all; returns the bytes written."""
        ...

    def pull(self, sandbox_rel: str, destination: Path, *, limit: int) -> int:
        """Copy the regular file at ``sandbox_rel`` to the host file ``destination`` (replaced whole);
        returns its size. A link or special file there raises ``UnsafeEntry``, a missing one
        ``FileNotFoundError``; a sparse one, or one of more than ``limit`` bytes (counted as they are
        read, never from a stat), ``OverBound`` with nothing written (all ``OSError``)."""
        ...


@dataclass(frozen=True)
class BackendCheck:
    ok: bool
    message: str
    fix: str | None = None


class CodeFailed(CodeExecutionError):  # type: ignore[misc]
    """Guest code failed. ``str()`` is what the model sees (output, trimmed traceback, hints); the
    parts are for the person: the exception's type and message and the line of the code it failed on."""

    def __init__(self, text: str, *, error_type: str, message: str, line: int | None, traceback: str = "") -> None:
        super().__init__(text)
        self.error_type = error_type
        self.message = message
        self.line = line
        self.traceback = traceback


class CodeSyntaxError(SyntaxError):
    """Guest code did not compile; ``line`` is where (the message already says it to the model)."""

    def __init__(self, text: str, line: int | None) -> None:
        super().__init__(text)
        self.line = line


class SandboxCrashed(CodeInterpreterError):  # type: ignore[misc]
    """The worker died or broke its protocol during an execution: not a cancel and not a shutdown.

    The sandbox is unusable, as after any ``CodeInterpreterError``, but nothing outside it is wrong:
    a fresh sandbox on the same workspace can carry on. ``cause`` says what happened in a few words
    ("exit status 3", "SIGKILL at the 512 MB memory limit"); ``output`` is what the execution
    printed before it.
    """

    def __init__(self, text: str, *, cause: str) -> None:
        super().__init__(text)
        self.cause = cause
        self.output = ""


class InvalidInterpreterInput(CodeInterpreterError, ValueError):  # type: ignore[misc]
    """What the host handed the sandbox cannot be used (code that is not a string, a bad tool, variable
    or output field name, a value that is not JSON), so nothing ran and the sandbox is as it was. A
    ``CodeInterpreterError``, as DSPy's protocol asks of host-side setup errors, and a ``ValueError``,
    as ``dspy.LocalInterpreter`` raises for bad tool names and output fields."""


class SandboxUnavailable(RuntimeError):
    """The backend cannot start a sandbox on this machine; the message says how to fix it."""


class SandboxBackend(abc.ABC):
    """A way of making sandboxes. One required method: :meth:`create`."""

    name: str = "abstract"

    @property
    def execution_instructions(self) -> str:
        """What the model is told about running code here (``dspy.RLM`` reads it off the factory)."""
        return ""

    def prepare(self, progress: Progress | None = None) -> None:
        """Get ready to make sandboxes now rather than at the first one (the local backend builds its
        environment), reporting slow steps to ``progress``. Raises SandboxUnavailable."""
        return None

    @classmethod
    def from_settings(cls, settings: SandboxSettings) -> Self:
        """This backend as the sandbox settings configure it (what the registry calls)."""
        return cls()

    @abc.abstractmethod
    def create(self, spec: SandboxSpec) -> Sandbox:
        """Make a new, not yet started sandbox for ``spec``. Raises SandboxUnavailable."""

    def workspace_volume(self, directory: Path, limits: SandboxLimits) -> Volume:
        """A place at ``directory`` for a workspace of this backend's sandboxes, bounded by
        ``limits.disk_mb`` and ``limits.max_files`` where the backend can. The caller releases it
        once every sandbox on it has ended."""
        return plain_volume(directory)

    def workspace_files(self, workspace: Path) -> WorkspaceFiles:
        """How the host puts files into the workspace at ``workspace`` and takes them out. A
        backend whose workspace is a host directory keeps this; a remote one overrides it."""
        return HostDirectoryFiles(workspace)

    def check(self) -> BackendCheck:
        """Whether this backend works here, for ``fleet doctor``."""
        return BackendCheck(True, f"sandbox backend {self.name!r} available")

    @property
    def isolated(self) -> bool:
        return True


def _nothing() -> None:
    return None


class SandboxFactory:
    """The one way sandboxes are made: for a turn, a child agent and the pool alike.

    ``dspy.RLM`` calls it with no arguments once per forward and reads the backend's
    ``execution_instructions`` off it. Before each sandbox, ``admit`` may refuse by raising (a spent
    budget, a cancelled turn); ``on_create`` hears of each new sandbox (to interrupt it on cancel);
    the caller gets ``wrap(sandbox)``. ``created`` lists what it made.
    """

    def __init__(
        self,
        backend: SandboxBackend,
        spec: SandboxSpec,
        *,
        admit: Callable[[], None] = _nothing,
        on_create: Callable[[Sandbox], None] | None = None,
        wrap: Callable[[Sandbox], Sandbox] | None = None,
    ) -> None:
        self.backend = backend
        self.spec = spec
        self.execution_instructions = backend.execution_instructions
        self._admit = admit
        self._on_create = on_create
        self._wrap = wrap
        self._lock = threading.Lock()
        self.created: list[Sandbox] = []

    def __call__(self) -> Sandbox:
        sandbox = self.make()
        return sandbox if self._wrap is None else self._wrap(sandbox)

    def make(self) -> Sandbox:
        """A new sandbox, admitted and announced like every other, but not wrapped: what a wrapper
        calls to replace the sandbox it holds (a restart after a crash)."""
        self._admit()
        sandbox = self.backend.create(self.spec)
        with self._lock:
            self.created.append(sandbox)
        if self._on_create is not None:
            self._on_create(sandbox)
        return sandbox
