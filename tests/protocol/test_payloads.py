"""The payload models: one per event type, strict where they are built, and the wire as it was."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from fleet_rlm.engine.emitter import EventEmitter
from fleet_rlm.protocol.events import SCHEMA_VERSION, TERMINAL_TYPES, Event, EventDataError, EventType
from fleet_rlm.protocol.ids import is_session_id, new_session_id
from fleet_rlm.protocol.payloads import (
    PAYLOAD_OF,
    BudgetExhausted,
    Output,
    Payload,
    SandboxInfo,
    ToolFinished,
    TurnInterrupted,
    TurnLimits,
    TurnStarted,
    terminal_payload,
)
from fleet_rlm.protocol.status import ACTIVE_STATUSES, FINAL_STATUSES, TurnStatus


def emitted(*payloads: Payload) -> list[dict[str, object]]:
    events: list[Event] = []
    emitter = EventEmitter("turn_1", events.append)
    for payload in payloads:
        emitter.emit(payload)
    return [event.to_dict()["data"] for event in events]


def test_every_event_type_but_the_heartbeat_has_one_payload_model() -> None:
    assert set(PAYLOAD_OF) == set(EventType) - {EventType.HEARTBEAT}
    assert all(payload.event_type is kind for kind, payload in PAYLOAD_OF.items())


@pytest.mark.parametrize(
    "build",
    [
        lambda: Output(stream="stdout", txt="x"),  # type: ignore[call-arg]
        lambda: Output(stream="stdin", text="x"),  # type: ignore[arg-type]
        lambda: ToolFinished(call_id="c", name="llm_query", duration="0.1", error=None),  # type: ignore[arg-type]
        lambda: BudgetExhausted(budget="patience", limit=1),  # type: ignore[arg-type]
    ],
    ids=["misspelt field", "unknown value", "text for a number", "unknown budget"],
)
def test_a_wrong_payload_fails_where_it_is_built(build: object) -> None:
    with pytest.raises(ValidationError):
        build()  # type: ignore[operator]


def test_the_wire_keeps_todays_data() -> None:
    started = TurnStarted(
        schema=SCHEMA_VERSION,
        task="t",
        context_paths=["files/a.csv"],
        mode="hybrid",
        sandbox=SandboxInfo(backend="local", isolated=True),
        budget=TurnLimits(max_iterations=20, max_model_calls=60, turn_timeout=900.0, execution_timeout=120.0),
    )
    data = emitted(
        started,
        BudgetExhausted(budget="deadline", limit=2.5),
        BudgetExhausted(budget="iterations", limit=2, used=2),
        TurnInterrupted(reason="the process died"),
    )
    assert data == [
        {
            "schema": SCHEMA_VERSION,
            "task": "t",
            "context_paths": ["files/a.csv"],
            "mode": "hybrid",
            "sandbox": {"backend": "local", "isolated": True},
            "budget": {"max_iterations": 20, "max_model_calls": 60, "turn_timeout": 900.0, "execution_timeout": 120.0},
        },
        {"budget": "deadline", "limit": 2.5},
        {"budget": "iterations", "limit": 2, "used": 2},
        {"reason": "the process died"},
    ]


def test_a_terminal_payload_takes_what_its_event_carries() -> None:
    outcome = {"reason": "the turn was cancelled", "answer": None, "answer_source": None, "usage": {}}
    assert terminal_payload(TurnStatus.CANCELLED, **outcome).to_data() == {
        "reason": "the turn was cancelled",
        "usage": {},
    }
    with pytest.raises(ValidationError):  # a completed turn has an answer and its usage
        terminal_payload(TurnStatus.COMPLETED, **outcome)


def test_statuses_are_active_or_final_and_each_final_one_has_its_terminal_event() -> None:
    assert set(ACTIVE_STATUSES) | set(FINAL_STATUSES) == set(TurnStatus)
    assert not set(ACTIVE_STATUSES) & set(FINAL_STATUSES)
    assert {status.terminal_event for status in FINAL_STATUSES} == TERMINAL_TYPES
    assert all(status.active for status in ACTIVE_STATUSES)


def test_session_ids_are_told_apart_from_names() -> None:
    assert is_session_id(new_session_id())
    assert not is_session_id("sales-2024")


def test_an_event_read_from_the_wire_gives_its_typed_payload_equal_to_the_emitted_one() -> None:
    sent = TurnStarted(
        schema_version=SCHEMA_VERSION,
        task="t",
        context_paths=["files/a.csv"],
        mode="hybrid",
        sandbox=SandboxInfo(backend="local", isolated=True),
        budget=TurnLimits(max_iterations=3, max_model_calls=9, turn_timeout=60.0, execution_timeout=20.0),
    )
    events: list[Event] = []
    EventEmitter("turn_1", events.append).emit(sent)
    assert events[0].payload is sent, "an emitted event carries its payload, never parsed again"

    read = Event.from_dict(json.loads(json.dumps(events[0].to_dict())))

    assert read.payload == sent
    assert isinstance(read.payload, TurnStarted) and read.payload.budget.max_iterations == 3


def test_event_data_that_breaks_the_protocol_is_refused_at_the_edge_naming_the_field() -> None:
    raw = {"type": "tool.finished", "seq": 1, "turn_id": "turn_1", "ts": 1.0, "span_id": "s", "parent_span_id": None}

    with pytest.raises(EventDataError, match=r"tool\.finished event data .*duration"):
        Event.from_dict({**raw, "data": {"call_id": "c", "name": "llm_query", "duration": "slow", "error": None}})
    with pytest.raises(EventDataError, match=r"tool\.finished event data .*call_id: Field required"):
        Event.from_dict({**raw, "data": {"name": "llm_query", "duration": 1.0, "error": None}})
