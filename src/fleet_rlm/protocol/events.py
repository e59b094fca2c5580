"""The closed, versioned vocabulary of events a turn emits, and the emitter that stamps them.

Every event serializes as ``{"type", "seq", "turn_id", "ts", "span_id", "parent_span_id", "data"}``.
``seq`` only grows within a turn. Spans form a tree (turn > iteration > tool call, child agent > ...)
so clients can draw nested work. Documented in ``docs/events.md``; bump ``SCHEMA_VERSION`` (and list
the change there) when an event type is added or an event's meaning or required data changes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleet_rlm.protocol.payloads import Payload

SCHEMA_VERSION = 5


class EventType(StrEnum):
    TURN_STARTED = "turn.started"
    ROUTE_SELECTED = "route.selected"
    KERNEL_EVICTED = "kernel.evicted"
    KERNEL_STARTED = "kernel.started"
    KERNEL_RESTORED = "kernel.restored"
    ITERATION_STARTED = "iteration.started"
    REASONING_DELTA = "reasoning.delta"
    CODE_DELTA = "code.delta"
    REASONING = "reasoning"
    CODE = "code"
    OUTPUT = "output"
    EXECUTION_FAILED = "execution.failed"
    SANDBOX_RESTARTED = "sandbox.restarted"
    TOOL_STARTED = "tool.started"
    TOOL_FINISHED = "tool.finished"
    CHILD_STARTED = "child.started"
    CHILD_FINISHED = "child.finished"
    ARTIFACT_CREATED = "artifact.created"
    MEMORY_PROPOSED = "memory.proposed"
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

    @cached_property
    def payload(self) -> Payload:
        """``data`` as its event type's payload model, parsed once: what consumers match on by class.

        Raises :class:`EventDataError` when ``data`` breaks the protocol (a heartbeat has none).
        """
        from fleet_rlm.protocol.payloads import parsed_payload

        return parsed_payload(self.type, self.data)

    @classmethod
    def carrying(
        cls, payload: Payload, *, seq: int, turn_id: str, ts: float, span_id: str, parent_span_id: str | None
    ) -> Event:
        """The event whose data is ``payload``; its ``payload`` is that object, never parsed again."""
        event = cls(payload.event_type, seq, turn_id, ts, span_id, parent_span_id, payload.to_data())
        event.__dict__["payload"] = payload  # what cached_property would store
        return event

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
        """The event as the wire gives it (an SSE frame, a JSONL line), its payload parsed here: data
        that breaks the protocol raises :class:`EventDataError` at the edge, not in a consumer."""
        event = cls.unparsed(raw)
        if event.type is not EventType.HEARTBEAT:
            _ = event.payload
        return event

    @classmethod
    def unparsed(cls, raw: dict[str, Any]) -> Event:
        """The event's envelope from ``raw``, its data left as it is: for a checker that reports what
        is wrong with the data itself (``fleet_rlm.testing.turn_events``)."""
        return cls(
            type=EventType(raw["type"]),
            seq=int(raw["seq"]),
            turn_id=str(raw["turn_id"]),
            ts=float(raw["ts"]),
            span_id=str(raw["span_id"]),
            parent_span_id=raw.get("parent_span_id"),
            data=dict(raw.get("data") or {}),
        )


class EventDataError(ValueError):
    """An event's data does not match its type's payload; the message names the type and the fields."""


EventSink = Callable[[Event], None]
