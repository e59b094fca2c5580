"""A sandbox backend that records every file crossing its push/pull seam: the local backend
otherwise, so tests run real sandboxes and see which paths the service moved in and out."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet_rlm.sandbox.base import WorkspaceFiles
from fleet_rlm.sandbox.local import LocalSandboxBackend
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

    def pull(self, sandbox_rel: str, destination: Path) -> int:
        with self.log.lock:
            self.log.pulled.append(sandbox_rel)
        return self.inner.pull(sandbox_rel, destination)


class SeamRecordingBackend(LocalSandboxBackend):
    name = "local-recording"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seam = SeamLog()

    def workspace_files(self, workspace: Path) -> WorkspaceFiles:
        return RecordingFiles(super().workspace_files(workspace), self.seam)
