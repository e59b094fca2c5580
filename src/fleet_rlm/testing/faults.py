"""Faults injected into real parts: a database call that fails as a dropped connection makes it fail."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

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
