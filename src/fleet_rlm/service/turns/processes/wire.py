"""The connection between a Fleet process and one of its turn processes: pickled messages over a
socket pair, with calls either way.

Both ends are Fleet's own code (nothing a sandbox wrote is ever unpickled: what sandbox code sends
reaches the Fleet process as JSON and is pickled there). Each call is handled on a thread of its own,
so a call may call back (an execution in the Fleet process calls a tool in the turn process, which
may run a child agent whose sandbox is in the Fleet process again). Errors cross as
:class:`Failure` records and are raised again as the same Fleet or DSPy exception.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from dspy.primitives import CodeInterpreterError

from fleet_rlm.engine.memory import MemoryRefused
from fleet_rlm.sandbox.base import (
    CodeFailed,
    CodeSyntaxError,
    InvalidInterpreterInput,
    SandboxCrashed,
    SandboxUnavailable,
)
from fleet_rlm.sandbox.local_sandbox import SandboxStartError
from fleet_rlm.sandbox.tool_calls import ToolError

log = logging.getLogger(__name__)

CLOSE_WAIT = 5.0
"""How long :meth:`Peer.close` waits for its reader to see the end."""


class PeerGone(CodeInterpreterError):  # type: ignore[misc]
    """The other end of the connection closed (its process ended) before answering."""


class CrossedError(RuntimeError):
    """An error of another kind than those that cross as themselves; its text is ``Type: message``."""


@dataclass(frozen=True)
class Call:
    """A request the other end answers with a :class:`Reply` of the same id."""

    id: int
    kind: str
    turn_id: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Notice:
    """A message that gets no reply (an event, an observer's report, a turn's end)."""

    kind: str
    turn_id: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Failure:
    """An exception, as it crosses: its kind, its text, and what the kind carries besides."""

    kind: str
    text: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    id: int
    value: Any = None
    failure: Failure | None = None


def to_failure(exc: BaseException) -> Failure:
    if isinstance(exc, CodeFailed):
        fields = {"error_type": exc.error_type, "message": exc.message, "line": exc.line, "traceback": exc.traceback}
        return Failure("CodeFailed", str(exc), fields)
    if isinstance(exc, CodeSyntaxError):
        return Failure("CodeSyntaxError", str(exc), {"line": exc.line})
    if isinstance(exc, SandboxCrashed):
        return Failure("SandboxCrashed", str(exc), {"cause": exc.cause, "output": exc.output})
    for kind in (
        SandboxStartError,
        InvalidInterpreterInput,
        SandboxUnavailable,
        MemoryRefused,
        ToolError,
        CodeInterpreterError,
    ):
        if isinstance(exc, kind):
            return Failure(kind.__name__, str(exc))
    return Failure("other", f"{type(exc).__name__}: {exc}")


def from_failure(failure: Failure) -> Exception:
    fields = failure.fields
    if failure.kind == "CodeFailed":
        return CodeFailed(failure.text, **fields)
    if failure.kind == "CodeSyntaxError":
        return CodeSyntaxError(failure.text, fields["line"])
    if failure.kind == "SandboxCrashed":
        crash = SandboxCrashed(failure.text, cause=fields["cause"])
        crash.output = fields["output"]
        return crash
    simple: dict[str, type[Exception]] = {
        "SandboxStartError": SandboxStartError,
        "InvalidInterpreterInput": InvalidInterpreterInput,
        "SandboxUnavailable": SandboxUnavailable,
        "MemoryRefused": MemoryRefused,
        "ToolError": ToolError,
        "CodeInterpreterError": CodeInterpreterError,
    }
    return simple.get(failure.kind, CrossedError)(failure.text)


CallHandler = Callable[[Call], Any]
NoticeHandler = Callable[[Notice], None]


class Peer:
    """One end of the connection. ``on_call`` answers the other end's calls (on a thread per call),
    ``on_notice`` takes its notices (in order, on the reading thread: keep it short), and ``on_closed``
    hears once that the other end is gone; calls still waiting then raise :class:`PeerGone`."""

    def __init__(
        self,
        connection: Connection,
        on_call: CallHandler,
        on_notice: NoticeHandler,
        on_closed: Callable[[], None] = lambda: None,
        *,
        name: str = "peer",
    ) -> None:
        self._connection = connection
        self._on_call = on_call
        self._on_notice = on_notice
        self._on_closed = on_closed
        self._name = name
        self._send_lock = threading.Lock()
        self._pending: dict[int, Future[Any]] = {}
        self._pending_lock = threading.Lock()
        self._ids = itertools.count(1)
        self.closed = False
        self._reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)

    def start(self) -> None:
        self._reader.start()

    def send(self, message: Call | Notice | Reply) -> None:
        with self._send_lock:
            if self.closed:
                raise PeerGone(f"{self._name}: the connection is closed")
            try:
                self._connection.send(message)
            except (OSError, EOFError) as exc:
                raise PeerGone(f"{self._name}: the connection is closed ({exc})") from exc

    def notify(self, kind: str, turn_id: str, *args: Any) -> None:
        self.send(Notice(kind, turn_id, args))

    def call(self, kind: str, turn_id: str, *args: Any) -> Any:
        """Ask the other end and wait for its answer (raised again here if it failed)."""
        number = next(self._ids)
        waiting: Future[Any] = Future()
        with self._pending_lock:
            if self.closed:
                raise PeerGone(f"{self._name}: the connection is closed")
            self._pending[number] = waiting
        try:
            self.send(Call(number, kind, turn_id, args))
            return waiting.result()
        finally:
            with self._pending_lock:
                self._pending.pop(number, None)

    def close(self) -> None:
        """End the connection: both ends' readers see it end (and their waiting calls fail)."""
        with self._send_lock:
            self.closed = True
            with contextlib.suppress(OSError):
                end = socket.socket(fileno=self._connection.fileno())
                end.shutdown(socket.SHUT_RDWR)
                end.detach()
        if self._reader.is_alive() and self._reader is not threading.current_thread():
            self._reader.join(timeout=CLOSE_WAIT)
        self._connection.close()

    def _read(self) -> None:
        try:
            while True:
                message = self._connection.recv()
                if isinstance(message, Reply):
                    self._answered(message)
                elif isinstance(message, Call):
                    threading.Thread(
                        target=self._answer, args=(message,), name=f"{self._name}-call", daemon=True
                    ).start()
                else:
                    self._on_notice(message)
        except (EOFError, OSError):
            pass
        except Exception:
            log.exception("%s: reading the connection failed", self._name)
        self._gone()

    def _answered(self, reply: Reply) -> None:
        with self._pending_lock:
            waiting = self._pending.get(reply.id)
        if waiting is None:
            return
        if reply.failure is not None:
            waiting.set_exception(from_failure(reply.failure))
        else:
            waiting.set_result(reply.value)

    def _answer(self, call: Call) -> None:
        try:
            reply = Reply(call.id, value=self._on_call(call))
        except BaseException as exc:
            reply = Reply(call.id, failure=to_failure(exc))
        try:
            self.send(reply)
        except PeerGone:
            pass
        except Exception as exc:  # the value could not be pickled: the caller learns why
            self.send(Reply(call.id, failure=to_failure(exc)))

    def _gone(self) -> None:
        with self._pending_lock:
            self.closed = True
            pending = list(self._pending.values())
        for waiting in pending:
            if not waiting.done():
                waiting.set_exception(PeerGone(f"{self._name}: the other process ended"))
        self._on_closed()
