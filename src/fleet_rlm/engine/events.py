"""The closed, versioned vocabulary of events a turn emits, and the emitter that stamps them.

Every event serializes as ``{"type", "seq", "turn_id", "ts", "span_id", "parent_span_id", "data"}``.
``seq`` only grows within a turn. Spans form a tree (turn > iteration > tool call, child agent > ...)
so clients can draw nested work. Documented in ``docs/events.md``; bump ``SCHEMA_VERSION`` when an
event's meaning or required data changes.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

SCHEMA_VERSION = 2


class EventType(StrEnum):
    TURN_STARTED = "turn.started"
    ROUTE_SELECTED = "route.selected"
    ITERATION_STARTED = "iteration.started"
    REASONING_DELTA = "reasoning.delta"
    CODE_DELTA = "code.delta"
    REASONING = "reasoning"
    CODE = "code"
    OUTPUT = "output"
    EXECUTION_FAILED = "execution.failed"
    TOOL_STARTED = "tool.started"
    TOOL_FINISHED = "tool.finished"
    CHILD_STARTED = "child.started"
    CHILD_FINISHED = "child.finished"
    ARTIFACT_CREATED = "artifact.created"
    BUDGET_EXHAUSTED = "budget.exhausted"
    WARNING = "warning"
    HEARTBEAT = "heartbeat"
    TURN_COMPLETED = "turn.completed"
    TURN_INCOMPLETE = "turn.incomplete"
    TURN_FAILED = "turn.failed"
    TURN_CANCELLED = "turn.cancelled"
    TURN_INTERRUPTED = "turn.interrupted"


TERMINAL_TYPES = frozenset(
    {
        EventType.TURN_COMPLETED,
        EventType.TURN_INCOMPLETE,
        EventType.TURN_FAILED,
        EventType.TURN_CANCELLED,
        EventType.TURN_INTERRUPTED,
    }
)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class Event:
    type: EventType
    seq: int
    turn_id: str
    ts: float
    span_id: str
    parent_span_id: str | None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_TYPES

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type.value,
            "seq": self.seq,
            "turn_id": self.turn_id,
            "ts": self.ts,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "data": self.data,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Event:
        return cls(
            type=EventType(raw["type"]),
            seq=int(raw["seq"]),
            turn_id=str(raw["turn_id"]),
            ts=float(raw["ts"]),
            span_id=str(raw["span_id"]),
            parent_span_id=raw.get("parent_span_id"),
            data=dict(raw.get("data") or {}),
        )


EventSink = Callable[[Event], None]


class EventEmitter:
    """Stamps events with a growing ``seq`` and hands them to sinks; safe to call from any thread.

    After a terminal event nothing more is emitted: late events from abandoned work are dropped,
    so a turn always ends with exactly one terminal event.
    """

    def __init__(self, turn_id: str, *sinks: EventSink, start_seq: int = 0) -> None:
        self.turn_id = turn_id
        self.root_span = new_id("span")
        self._sinks = list(sinks)
        self._seq = itertools.count(start_seq + 1)
        self._lock = threading.Lock()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def add_sink(self, sink: EventSink) -> None:
        self._sinks.append(sink)

    def emit(
        self,
        type: EventType,
        data: dict[str, Any] | None = None,
        *,
        span_id: str | None = None,
        parent_span_id: str | None = None,
    ) -> Event | None:
        with self._lock:
            if self._closed:
                return None
            if type in TERMINAL_TYPES:
                self._closed = True
            is_root = span_id is None and parent_span_id is None
            event = Event(
                type=type,
                seq=next(self._seq),
                turn_id=self.turn_id,
                ts=time.time(),
                span_id=span_id or self.root_span,
                parent_span_id=None if is_root else (parent_span_id or self.root_span),
                data=data or {},
            )
            for sink in self._sinks:
                sink(event)
        return event
