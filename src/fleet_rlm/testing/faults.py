"""Faults injected into real parts: a database call that fails as a dropped connection makes it fail;
a call held at a chosen point so that a test can run another one in between."""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable, Callable
from typing import BinaryIO, ParamSpec, TypeVar

from sqlalchemy.exc import OperationalError

P = ParamSpec("P")
T = TypeVar("T")


def lost_connection(statement: str) -> OperationalError:
    """The error a database driver raises when the connection drops mid-statement (a transient failure)."""
    return OperationalError(statement, None, ConnectionResetError("connection lost (injected by the test)"))


class FailingCalls:
    """Makes an async call fail its first ``failures`` times (every time when None), then reach the real one.

    ``calls`` counts every call, ``failed`` the ones that failed; ``blocked`` the failures still to come.
    """

    def __init__(self, failures: int | None) -> None:
        self.failures = failures
        self.calls = 0
        self.failed = 0

    @property
    def blocked(self) -> bool:
        return self.failures is None or self.failed < self.failures

    def wrap(self, call: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        @functools.wraps(call)
        async def failing(*args: P.args, **kwargs: P.kwargs) -> T:
            self.calls += 1
            if self.blocked:
                self.failed += 1
                raise lost_connection(getattr(call, "__name__", "call"))
            return await call(*args, **kwargs)

        return failing


class Gate:
    """Holds a call at a chosen point until the test lets it go: ``reached`` is set when the call
    gets there; ``release()`` lets it go on. For races (a delete while an upload is half stored)."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.reached = threading.Event()
        self._released = threading.Event()
        self._timeout = timeout

    def hold(self) -> None:
        """Called from the held call (in a worker thread): wait here until released."""
        self.reached.set()
        if not self._released.wait(self._timeout):
            raise TimeoutError("the test never released the gate")

    def release(self) -> None:
        self._released.set()

    def wait_reached(self) -> None:
        if not self.reached.wait(self._timeout):
            raise TimeoutError("the call never reached the gate")


class GatedReader:
    """A readable stream whose first ``read`` waits at ``gate``, then reads ``source``."""

    def __init__(self, source: BinaryIO, gate: Gate) -> None:
        self._source = source
        self._gate: Gate | None = gate

    def read(self, size: int = -1) -> bytes:
        if self._gate is not None:
            self._gate.hold()
            self._gate = None
        return self._source.read(size)
