"""Shared pieces of the sandbox tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fleet_rlm.sandbox.base import SandboxLimits
from fleet_rlm.sandbox.local_sandbox import LocalSandbox

# Short limits keep the suite fast; tests that need others pass their own.
TEST_LIMITS = SandboxLimits(memory_mb=1024, max_processes=32, execution_timeout=5.0, max_output_chars=20_000)


@dataclass
class RecordingObserver:
    """Records everything a sandbox reports, with arrival times."""

    outputs: list[tuple[float, str, str]] = field(default_factory=list)
    started: list[tuple[str, str, str]] = field(default_factory=list)
    finished: list[tuple[str, str, float, str | None]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    first_output: threading.Event = field(default_factory=threading.Event)

    def output(self, stream: str, text: str) -> None:
        with self.lock:
            self.outputs.append((time.monotonic(), stream, text))
        self.first_output.set()

    def tool_started(self, call_id: str, name: str, arguments: str) -> None:
        with self.lock:
            self.started.append((call_id, name, arguments))

    def tool_finished(self, call_id: str, name: str, duration: float, error: str | None) -> None:
        with self.lock:
            self.finished.append((call_id, name, duration, error))

    def warning(self, message: str) -> None:
        with self.lock:
            self.warnings.append(message)

    def wait_for_text(self, expected: str, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while expected not in self.text():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def text(self, stream: str | None = None) -> str:
        with self.lock:
            return "".join(t for _, s, t in self.outputs if stream is None or s == stream)


SandboxMaker = Callable[..., LocalSandbox]
"""The ``make_sandbox`` fixture: a sandbox on the test workspace, with limit overrides as keywords."""
