"""Local sandbox backends for tests, real sandboxes otherwise: one that records every file crossing
its push/pull seam (which paths the service moved in and out), one whose sandboxes wait to start
until the test lets them (what a person sees while a sandbox is slow to start)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet_rlm.sandbox.base import SandboxSpec, WorkspaceFiles
from fleet_rlm.sandbox.local import LocalSandboxBackend
from fleet_rlm.sandbox.local_sandbox import LocalSandbox
from fleet_rlm.sandbox.transfer import Readable


@dataclass
class SeamLog:
    pushed: list[str] = field(default_factory=list)
    pulled: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class RecordingFiles:
    inner: WorkspaceFiles
    log: SeamLog

    def push(self, source: Path | Readable, sandbox_rel: str) -> int:
        with self.log.lock:
            self.log.pushed.append(sandbox_rel)
        return self.inner.push(source, sandbox_rel)

    def pull(self, sandbox_rel: str, destination: Path, *, limit: int) -> int:
        with self.log.lock:
            self.log.pulled.append(sandbox_rel)
        return self.inner.pull(sandbox_rel, destination, limit=limit)


class SeamRecordingBackend(LocalSandboxBackend):
    name = "local-recording"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seam = SeamLog()

    def workspace_files(self, workspace: Path) -> WorkspaceFiles:
        return RecordingFiles(super().workspace_files(workspace), self.seam)


HELD_SECONDS = 60.0


class HeldStartBackend(LocalSandboxBackend):
    """Each sandbox's start waits (on the thread starting it) until :attr:`release` is set, or
    :data:`HELD_SECONDS` passed; :attr:`holding` is set once a start waits, and :attr:`waiting` counts
    the starts waiting now. With :attr:`held_sessions` set, only the sandboxes of those sessions wait."""

    name = "local-held"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.holding = threading.Event()
        self.release = threading.Event()
        self.held_sessions: set[str] | None = None
        self.waiting = 0
        self._count = threading.Lock()

    def hold(self, labels: Mapping[str, str]) -> None:
        """Wait here if this sandbox is held (on the thread starting it)."""
        if self.held_sessions is not None and labels.get("session") not in self.held_sessions:
            return
        with self._count:
            self.waiting += 1
        self.holding.set()
        try:
            self.release.wait(HELD_SECONDS)
        finally:
            with self._count:
                self.waiting -= 1

    def create(self, spec: SandboxSpec) -> LocalSandbox:
        return _HeldSandbox(self, spec, self.checked_launcher(spec.limits), interrupt_grace=self.interrupt_grace)


class _HeldSandbox(LocalSandbox):
    def __init__(self, backend: HeldStartBackend, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._backend = backend

    def start(self) -> None:
        self._backend.hold(self.spec.labels)
        super().start()
