"""How a turn stands, and how a finished turn got its answer: one spelling for every layer."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from fleet_rlm.protocol.events import EventType


class TurnStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    @property
    def active(self) -> bool:
        return self in ACTIVE_STATUSES

    @property
    def terminal_event(self) -> EventType:
        """The event that ends a turn with this (final) status; KeyError for an active one."""
        return TERMINAL_EVENTS[self]


ACTIVE_STATUSES = (TurnStatus.QUEUED, TurnStatus.RUNNING)
FINAL_STATUSES = tuple(status for status in TurnStatus if status not in ACTIVE_STATUSES)

TERMINAL_EVENTS = {
    TurnStatus.COMPLETED: EventType.TURN_COMPLETED,
    TurnStatus.INCOMPLETE: EventType.TURN_INCOMPLETE,
    TurnStatus.FAILED: EventType.TURN_FAILED,
    TurnStatus.CANCELLED: EventType.TURN_CANCELLED,
    TurnStatus.INTERRUPTED: EventType.TURN_INTERRUPTED,
}

STATUS_MEANINGS = {
    TurnStatus.QUEUED: "accepted; waiting for a running-turn slot",
    TurnStatus.RUNNING: "running now",
    TurnStatus.COMPLETED: "answered (check `unverified`)",
    TurnStatus.INCOMPLETE: "could not compute a result; the answer says so plainly, and why",
    TurnStatus.FAILED: "ended by an error or a limit; `error` is one line saying which",
    TurnStatus.CANCELLED: "cancelled on request",
    TurnStatus.INTERRUPTED: "the process running it died or shut down",
}

AnswerSource = Literal["submitted", "extracted", "direct", "module"]
"""How a completed turn's answer was reached: the model called SUBMIT (rlm); the iteration budget ran
out and it was extracted from the work so far (rlm, unverified); the model answered without code
(direct); the flex module returned it (flex)."""

ChildOutcome = Literal["completed", "incomplete", "failed", "timeout", "cancelled"]
"""How a child agent that ran ended."""
