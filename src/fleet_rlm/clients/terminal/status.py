"""The live status line under a running turn: iteration k/N, model calls used / budget, elapsed.

Events carry no running usage, so model calls are counted from what the stream shows: one root
call per iteration and one per sub-model tool call (``llm_query``; a batch counts as one). The
exact figures arrive with the turn's final ``usage``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.protocol.payloads import (
    ChildFinished,
    ChildStarted,
    IterationStarted,
    ToolFinished,
    ToolStarted,
    TurnStarted,
)

MODEL_TOOLS = ("llm_query", "llm_query_batched")


@dataclass
class StatusLine:
    started_at: float | None = None
    iteration: int = 0
    max_iterations: int | None = None
    model_calls: int = 0
    max_model_calls: int | None = None
    running_tools: dict[str, str] = field(default_factory=dict)
    children_running: int = 0
    note: str = ""
    cancel_requested: bool = False
    cancel_error: str = ""
    finished: bool = False
    _spans: dict[str, str | None] = field(default_factory=dict, init=False, repr=False)
    _child_spans: set[str] = field(default_factory=set, init=False, repr=False)

    def observe(self, event: Event) -> None:
        if event.type is EventType.HEARTBEAT:
            return
        match event.payload:
            case TurnStarted(budget=budget):
                self.started_at = event.ts
                self.max_iterations = budget.max_iterations
                self.max_model_calls = budget.max_model_calls
            case IterationStarted(iteration=iteration, max_iterations=most):
                self.model_calls += 1
                if self._is_root_iteration(event):
                    self.iteration, self.max_iterations = iteration, most
            case ToolStarted(call_id=call_id, name=name):
                self.running_tools[call_id] = name
            case ToolFinished(call_id=call_id, name=name):
                self.running_tools.pop(call_id, None)
                if name in MODEL_TOOLS:
                    self.model_calls += 1
            case ChildStarted():
                self.children_running += 1
                self._child_spans.add(event.span_id)
            case ChildFinished():
                self.children_running = max(0, self.children_running - 1)
        if event.terminal:
            self.finished = True
        self._spans[event.span_id] = event.parent_span_id

    def _is_root_iteration(self, event: Event) -> bool:
        """Not inside a child agent: no ancestor span is a child's span."""
        span = event.parent_span_id
        while span is not None:
            if span in self._child_spans:
                return False
            span = self._spans.get(span)
        return True

    def line(self, now: float | None = None) -> str:
        parts = []
        if self.iteration:
            parts.append(f"iteration {self.iteration}/{self.max_iterations or '?'}")
        else:
            parts.append("starting")
        parts.append(f"model calls {self.model_calls}/{self.max_model_calls or '?'}")
        if self.started_at is not None:
            parts.append(f"{max(0.0, (now or time.time()) - self.started_at):.0f}s")
        if self.running_tools:
            parts.append("running " + ", ".join(sorted(set(self.running_tools.values()))))
        if self.children_running:
            parts.append(f"{self.children_running} child agent(s)")
        if self.cancel_requested:
            parts.append(f"cancel failed: {self.cancel_error}" if self.cancel_error else "cancelling…")
        if self.note:
            parts.append(self.note)
        return " · ".join(parts)
