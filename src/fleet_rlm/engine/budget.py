"""Per-turn budgets, enforced on the host: one counter for every model call in a run tree."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from fleet_rlm.engine.usage import TurnUsage
from fleet_rlm.protocol.payloads import BudgetKind


class BudgetExceeded(RuntimeError):
    """A turn limit was hit; ``kind`` names the limit (model_calls, tokens, cost, children, deadline,
    sandbox_restarts)."""

    def __init__(self, kind: BudgetKind, limit: float, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.limit = limit


class TurnCancelled(RuntimeError):
    """The turn was cancelled; raised into any work that is still running for it."""


@dataclass
class TurnBudget:
    """Limits and counters shared by the root model, ``llm_query`` and (later) child agents."""

    max_model_calls: int
    deadline: float  # time.monotonic() value
    max_tokens: int | None = None
    max_cost: float | None = None
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)
    max_children: int = 0
    children_started: int = 0
    max_sandbox_restarts: int = 0
    sandbox_restarts: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    usage: TurnUsage = field(default_factory=TurnUsage)
    cancelled: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def model_calls(self) -> int:
        with self._lock:
            return sum(self.calls.values())

    def remaining_seconds(self) -> float:
        return self.deadline - time.monotonic()

    def check_alive(self) -> None:
        if self.cancelled:
            raise TurnCancelled("the turn was cancelled")
        if time.monotonic() >= self.deadline:
            raise BudgetExceeded("deadline", 0, "the turn deadline has passed")

    def reserve_call(self, role: str, n: int = 1) -> None:
        """Count ``n`` model calls for ``role`` (root, sub, ...) or raise before making them."""
        self.check_alive()
        with self._lock:
            used = sum(self.calls.values())
            if used + n > self.max_model_calls:
                raise BudgetExceeded(
                    "model_calls",
                    self.max_model_calls,
                    f"model-call budget exhausted: {used} of {self.max_model_calls} calls used this turn",
                )
            if self.max_tokens is not None:
                spent = self.usage.input_tokens + self.usage.output_tokens
                if spent >= self.max_tokens:
                    raise BudgetExceeded(
                        "tokens", self.max_tokens, f"token budget exhausted: {spent} of {self.max_tokens} tokens used"
                    )
            if self.max_cost is not None:
                spent_cost = self.usage.cost(self.prices)
                if spent_cost >= self.max_cost:
                    raise BudgetExceeded(
                        "cost", self.max_cost, f"cost budget exhausted: {spent_cost:.4f} of {self.max_cost:g} spent"
                    )
            self.calls[role] = self.calls.get(role, 0) + n

    def reserve_child(self) -> int:
        """Count one more child agent for the turn or raise; returns its ordinal."""
        self.check_alive()
        with self._lock:
            if self.children_started >= self.max_children:
                raise BudgetExceeded(
                    "children", self.max_children, f"child-agent limit reached: {self.max_children} per turn"
                )
            self.children_started += 1
            return self.children_started

    def reserve_restart(self, cause: str) -> int:
        """Count one more restart of a crashed sandbox (``cause``: what ended it) or raise; its ordinal."""
        self.check_alive()
        with self._lock:
            limit = self.max_sandbox_restarts
            if self.sandbox_restarts >= limit:
                message = (
                    f"the sandbox crashed ({cause}) and restarts are off (max_sandbox_restarts is 0)"
                    if limit == 0
                    else f"the sandbox crashed again ({cause}) after {limit} restart{'s' if limit > 1 else ''}, the most one turn allows "
                    "(max_sandbox_restarts)"
                )
                raise BudgetExceeded("sandbox_restarts", limit, message)
            self.sandbox_restarts += 1
            return self.sandbox_restarts


def budget_error_in(exc: BaseException) -> BudgetExceeded | TurnCancelled | None:
    """The budget or cancel error behind ``exc`` (DSPy wraps errors raised inside model calls)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, BudgetExceeded | TurnCancelled):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


REASON_CHARS = 200


def one_line(exc: BaseException, *, with_type: bool = True) -> str:
    """A failure as one short line for a person: ``Type: first line of the message``."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    name = type(exc).__name__
    first = lines[0] if lines else ""
    text = (f"{name}: {first}" if with_type else first) if first else name
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."
