"""Checking that a turn's event stream, as ``fleet run --json`` printed it, keeps the documented contract
(docs/events.md): whatever a model did, every event is well-formed and exactly one terminal event ends it."""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import ValidationError

from fleet_rlm.protocol.events import TERMINAL_TYPES, Event, EventType
from fleet_rlm.protocol.schema import validate_event


def event_problems(raw: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the stream, one line per problem; empty when it keeps the contract."""
    if not raw:
        return ["no events"]
    problems: list[str] = []
    events: list[Event] = []
    for index, item in enumerate(raw):
        try:
            events.append(Event.unparsed(item))  # the schema check below names what is wrong with its data
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"event {index} is malformed ({exc!r}): {item!r}")
            continue
        try:
            validate_event(item)
        except ValidationError as exc:
            problems.append(f"event {index} ({item['type']}) breaks the schema {_first_error(exc)}")
    if len(events) < len(raw):
        return problems
    if events[0].type is not EventType.TURN_STARTED:
        problems.append(f"the first event is {events[0].type}, not turn.started")
    if len({e.turn_id for e in events}) != 1:
        problems.append("events name more than one turn")
    seqs = [e.seq for e in events]
    if any(later <= earlier for earlier, later in itertools.pairwise(seqs)):
        problems.append(f"seq does not only grow: {seqs}")
    spans = {e.span_id for e in events}
    for event in events:
        if event.parent_span_id is not None and event.parent_span_id not in spans:
            problems.append(f"{event.type} (seq {event.seq}) has an unknown parent span {event.parent_span_id}")
    terminals = [e for e in events if e.type in TERMINAL_TYPES]
    if len(terminals) != 1 or not events[-1].terminal:
        problems.append(f"expected exactly one terminal event, last: {[e.type.value for e in terminals]}")
    last = events[-1]
    if last.type is EventType.TURN_COMPLETED:
        if not isinstance(last.data.get("answer"), str):
            problems.append("turn.completed carries no answer")
        if last.data.get("answer_source") not in ("submitted", "extracted", "direct", "module"):
            problems.append(f"turn.completed does not say how its answer was reached: {last.data!r}")
        if last.data.get("unverified") is not (last.data.get("answer_source") == "extracted"):
            problems.append("turn.completed marks an answer unverified if and only if it was extracted")
    if last.type in (EventType.TURN_FAILED, EventType.TURN_INCOMPLETE):
        reason = last.data.get("reason")
        if not isinstance(reason, str) or not reason.strip() or "\n" in reason:
            problems.append(f"{last.type} does not carry a one-line reason: {reason!r}")
    if last.type is EventType.TURN_INCOMPLETE and not isinstance(last.data.get("answer"), str):
        problems.append("turn.incomplete does not say why there is no result")
    for event in events:
        if event.type is EventType.EXECUTION_FAILED and not event.data.get("error_type"):
            problems.append(f"execution.failed (seq {event.seq}) names no error type")
    return problems


def _first_error(exc: ValidationError) -> str:
    """Where and how, e.g. ``at data.iteration: Input should be a valid integer`` (the union's tag left out)."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"][1:])
    return f"at {where}: {error['msg']}"
