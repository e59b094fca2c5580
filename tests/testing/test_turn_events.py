"""The event-contract check the real-model tests use: it passes a documented stream and names each breach."""

from __future__ import annotations

from typing import Any

from fleet_rlm.protocol.events import EventType
from fleet_rlm.testing.turn_events import event_problems

from ..clients.terminal.events import STARTED, USAGE, TurnEvents, sample_turn_with_a_child


def dicts(turn: TurnEvents) -> list[dict[str, Any]]:
    return [event.to_dict() for event in turn.events]


def test_a_documented_stream_has_no_problems() -> None:
    assert event_problems(dicts(sample_turn_with_a_child())) == []


def test_a_stream_without_its_terminal_event_is_named() -> None:
    raw = dicts(sample_turn_with_a_child())[:-1]
    assert event_problems(raw) == ["expected exactly one terminal event, last: []"]


def test_a_failure_without_a_one_line_reason_is_named() -> None:
    turn = TurnEvents()
    turn.add(EventType.TURN_STARTED, **STARTED)
    turn.add(EventType.TURN_FAILED, reason="line one\nline two", usage=USAGE)
    assert event_problems(dicts(turn)) == ["turn.failed does not carry a one-line reason: 'line one\\nline two'"]


def test_malformed_and_out_of_order_events_are_named() -> None:
    raw = dicts(sample_turn_with_a_child())
    raw[3]["seq"] = 1
    assert any("seq does not only grow" in problem for problem in event_problems(raw))
    raw[2] = {"type": "no.such.event", "seq": 3}
    assert event_problems(raw)[0].startswith("event 2 is malformed")
    assert event_problems([]) == ["no events"]


def test_an_event_that_breaks_the_schema_is_named() -> None:
    raw = dicts(sample_turn_with_a_child())
    raw[1]["data"]["iteration"] = "one"
    del raw[-1]["data"]["usage"]["duration"]
    assert event_problems(raw) == [
        "event 1 (iteration.started) breaks the schema at data.iteration: Input should be a valid integer",
        "event 16 (turn.completed) breaks the schema at data.usage.duration: Field required",
    ]
