"""The one base for sandbox decorators: every part of :class:`Sandbox` passed to the sandbox it wraps.

A decorator (the turn's observed sandbox, the session's kept kernel, Flex's value-returning one)
subclasses :class:`WrapperSandbox` and overrides only what it changes, so a member added to
``Sandbox`` is added here once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fleet_rlm.sandbox.base import Sandbox, SandboxSpec


class WrapperSandbox:
    """A sandbox that is ``wrapped`` in every respect; ``wrapped`` may be replaced (a restart)."""

    def __init__(self, wrapped: Sandbox) -> None:
        self.wrapped = wrapped

    @property
    def tools(self) -> dict[str, Callable[..., Any]]:
        return self.wrapped.tools

    @tools.setter
    def tools(self, value: dict[str, Callable[..., Any]]) -> None:
        self.wrapped.tools = value

    @property
    def output_fields(self) -> list[dict[str, Any]] | None:
        return self.wrapped.output_fields

    @output_fields.setter
    def output_fields(self, value: list[dict[str, Any]] | None) -> None:
        self.wrapped.output_fields = value

    @property
    def spec(self) -> SandboxSpec:
        return self.wrapped.spec

    @property
    def isolated(self) -> bool:
        return self.wrapped.isolated

    @property
    def usable(self) -> bool:
        return self.wrapped.usable

    def start(self) -> None:
        self.wrapped.start()

    def execute(self, code: str, variables: dict[str, Any] | None = None) -> Any:
        return self.wrapped.execute(code, variables)

    def interrupt(self) -> None:
        self.wrapped.interrupt()

    def shutdown(self) -> None:
        self.wrapped.shutdown()
