"""The worker's stdout and stderr: read on one host thread as they are written, capped per execution.

The pipes are the worker's real fds 1 and 2, so output of subprocesses and C code counts too.
Each chunk goes to the observer at once. An execution's output is complete once the worker has
replied: every write it made happened before the reply, so draining the pipes then (without
blocking) picks up the rest.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import os
import selectors
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from fleet_rlm.protocol.payloads import OutputStream
from fleet_rlm.sandbox.base import SandboxObserver

logger = logging.getLogger(__name__)
STARTUP_KEEP_CHARS = 8_000
READ_SIZE = 1 << 16


@dataclass
class CappedText:
    """Output kept up to ``limit`` characters; the rest is only counted."""

    limit: int
    parts: list[str] = field(default_factory=list)
    kept: int = 0
    cut: int = 0
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        """A line from the host appended to the result, whatever the cap (e.g. a limit that was hit)."""
        self.notes.append(text)

    def add(self, text: str) -> str:
        """Keep what fits and return it."""
        room = self.limit - self.kept
        kept = text[:room] if room > 0 else ""
        self.cut += len(text) - len(kept)
        if kept:
            self.parts.append(kept)
            self.kept += len(kept)
        return kept

    def text(self) -> str:
        return "".join(self.parts)

    def result(self) -> str | None:
        """The execution's output as the interpreter returns it (None when there was none)."""
        text = self.text().rstrip("\n")
        if self.cut:
            text += f"\n[... {self.cut} more characters cut]"
        notes = "\n".join(f"[{note}]" for note in self.notes)
        if notes:
            text = f"{text}\n{notes}" if text else notes
        return text or None


class GuardedObserver:
    """An observer whose failures are logged, not raised: a broken observer must not stall the sandbox
    (an output chunk or a tool call it failed to take would otherwise never reach the code)."""

    def __init__(self, inner: SandboxObserver) -> None:
        self._inner = inner

    def output(self, stream: OutputStream, text: str) -> None:
        self._call(self._inner.output, stream, text)

    def tool_started(self, call_id: str, name: str, arguments: str) -> None:
        self._call(self._inner.tool_started, call_id, name, arguments)

    def tool_finished(self, call_id: str, name: str, duration: float, error: str | None) -> None:
        self._call(self._inner.tool_finished, call_id, name, duration, error)

    def warning(self, message: str) -> None:
        self._call(self._inner.warning, message)

    @staticmethod
    def _call(method: Callable[..., None], *args: object) -> None:
        try:
            method(*args)
        except Exception:
            logger.exception("the sandbox observer failed in %s", getattr(method, "__name__", method))


class OutputPump:
    """Routes the worker's output to the observer and to the running execution's capped text."""

    def __init__(self, stdout_fd: int, stderr_fd: int, observer: SandboxObserver, limit: int) -> None:
        self._observer = observer
        self._limit = limit
        self._lock = threading.Lock()
        self._streams: dict[int, OutputStream] = {stdout_fd: "stdout", stderr_fd: "stderr"}
        self._decoders = {fd: codecs.getincrementaldecoder("utf-8")("replace") for fd in self._streams}
        self._selector = selectors.DefaultSelector()
        for fd in self._streams:
            os.set_blocking(fd, False)
            self._selector.register(fd, selectors.EVENT_READ)
        self._startup: CappedText | None = CappedText(STARTUP_KEEP_CHARS)
        self._current = CappedText(limit)
        self._warned = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="fleet-sandbox-output", daemon=True)
        self._thread.start()

    def startup_text(self) -> str:
        """What the process wrote before it was ready (bwrap's or Python's own errors)."""
        with self._lock:
            self._drain()
            return self._startup.text() if self._startup else ""

    def ready(self) -> None:
        with self._lock:
            self._startup = None

    def begin(self) -> None:
        with self._lock:
            self._current = CappedText(self._limit)
            self._warned = False

    def finish(self) -> CappedText:
        """Drain what the execution wrote and return it; later output counts as background."""
        with self._lock:
            self._drain()
            finished, self._current = self._current, CappedText(self._limit)
            self._warned = False
            return finished

    def close(self) -> None:
        self._closed = True

    def _run(self) -> None:
        while self._streams and not self._closed:
            events = self._selector.select(timeout=0.5)
            with self._lock:
                for key, _ in events:
                    if key.fd in self._streams:
                        self._read(key.fd)
        with self._lock:
            for fd in list(self._streams):
                self._forget(fd)
            self._selector.close()

    def _drain(self) -> None:
        for fd in list(self._streams):
            while fd in self._streams and self._read(fd):
                pass

    def _read(self, fd: int) -> bool:
        """Read one chunk (lock held); False when nothing was waiting."""
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:
            self._forget(fd)
            return False
        text = self._decoders[fd].decode(data)
        if text:
            self._deliver(self._streams[fd], text)
        return True

    def _forget(self, fd: int) -> None:
        self._streams.pop(fd, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(fd)
        with contextlib.suppress(OSError):
            os.close(fd)

    def _deliver(self, stream: OutputStream, text: str) -> None:
        if self._startup is not None:
            self._startup.add(text)
            return
        kept = self._current.add(text)
        if kept:
            self._observer.output(stream, kept)
        if self._current.cut and not self._warned:
            self._warned = True
            self._observer.warning(f"sandbox output passed {self._limit} characters in one execution; the rest is cut")
