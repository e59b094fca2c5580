"""The sandbox seam: what every backend provides and what the engine observes.

A sandbox is one persistent Python worker plus one workspace directory. It implements DSPy's
``CodeInterpreter`` protocol (mutable ``tools``, ``start``/``execute``/``shutdown``,
``output_fields`` for a typed ``SUBMIT``) so that ``dspy.RLM`` runs on it unchanged. Backends
(``local`` with bubblewrap today, Daytona later) subclass :class:`SandboxBackend`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dspy.primitives.code_interpreter import CodeExecutionError

from fleet_rlm.config import Settings
from fleet_rlm.protocol.payloads import OutputStream
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

    @classmethod
    def from_settings(cls, settings: Settings) -> SandboxLimits:
        return cls(
            memory_mb=settings.sandbox_memory_mb,
            max_processes=settings.sandbox_max_processes,
            max_file_size_mb=settings.sandbox_max_file_size_mb,
            cpu_seconds=settings.sandbox_cpu_seconds,
            execution_timeout=settings.execution_timeout,
            max_output_chars=settings.max_output_chars,
            disk_mb=settings.sandbox_disk_mb,
            max_files=settings.sandbox_max_files,
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
    spec: SandboxSpec

    @property
    def isolated(self) -> bool: ...

    def start(self) -> None: ...

    def execute(self, code: str, variables: dict[str, Any] | None = None) -> Any: ...

    def interrupt(self) -> None:
        """Kill whatever is running now (cancel); the sandbox is unusable afterwards."""

    def shutdown(self) -> None: ...


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


class SandboxUnavailable(RuntimeError):
    """The backend cannot start a sandbox on this machine; the message says how to fix it."""


class SandboxBackend(abc.ABC):
    """A way of making sandboxes. One required method: :meth:`create`."""

    name: str = "abstract"
    execution_instructions: str = ""

    @abc.abstractmethod
    def create(self, spec: SandboxSpec) -> Sandbox:
        """Make a new, not yet started sandbox for ``spec``. Raises SandboxUnavailable."""

    def workspace_volume(self, directory: Path, limits: SandboxLimits) -> Volume:
        """A place at ``directory`` for a workspace of this backend's sandboxes, bounded by
        ``limits.disk_mb`` and ``limits.max_files`` where the backend can. The caller releases it
        once every sandbox on it has ended."""
        return plain_volume(directory)

    def check(self) -> BackendCheck:
        """Whether this backend works here, for ``fleet doctor``."""
        return BackendCheck(True, f"sandbox backend {self.name!r} available")

    @property
    def isolated(self) -> bool:
        return True


class SandboxFactory:
    """A zero-argument factory ``dspy.RLM`` calls once per forward; it carries the backend's
    ``execution_instructions`` and remembers the sandboxes it made so callers can cancel them."""

    def __init__(self, backend: SandboxBackend, spec_factory: Callable[[], SandboxSpec]) -> None:
        self.backend = backend
        self.execution_instructions = backend.execution_instructions
        self._spec_factory = spec_factory
        self.created: list[Sandbox] = []

    def __call__(self) -> Sandbox:
        sandbox = self.backend.create(self._spec_factory())
        self.created.append(sandbox)
        return sandbox

    def interrupt_all(self) -> None:
        for sandbox in self.created:
            sandbox.interrupt()
