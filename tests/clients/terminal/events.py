"""Event streams as a server sends them, built from the documented vocabulary (docs/events.md); every
event is checked against the protocol's schema as it is added."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.protocol.schema import validate_event

ROOT = "span_root"
STARTED: dict[str, Any] = {
    "schema": 4,
    "task": "Sum revenue",
    "context_paths": [],
    "mode": "rlm",
    "sandbox": {"backend": "local", "isolated": True},
    "budget": {"max_iterations": 5, "max_model_calls": 12, "turn_timeout": 900.0, "execution_timeout": 120.0},
}
USAGE: dict[str, Any] = {
    "route": "rlm",
    "model_calls": 3,
    "root_calls": 1,
    "sub_calls": 1,
    "child_calls": 1,
    "children": 1,
    "input_tokens": 30,
    "output_tokens": 9,
    "iterations": 1,
    "sandbox_errors": 0,
    "duration": 7.0,
}


class TurnEvents:
    def __init__(self, turn_id: str = "turn_1", start: float = 1000.0) -> None:
        self.turn_id = turn_id
        self.seq = itertools.count(1)
        self.ts = start
        self.events: list[Event] = []

    def add(self, kind: EventType, span: str = ROOT, parent: str | None = None, **data: Any) -> Event:
        self.ts += 0.5
        event = Event(kind, next(self.seq), self.turn_id, self.ts, span, parent, copy.deepcopy(data))
        validate_event(event.to_dict())
        self.events.append(event)
        return event


def sample_turn_with_a_child() -> TurnEvents:
    turn = TurnEvents()
    turn.add(EventType.TURN_STARTED, **STARTED)
    turn.add(EventType.ITERATION_STARTED, "span_it1", ROOT, iteration=1, max_iterations=5)
    turn.add(EventType.REASONING_DELTA, "span_it1", ROOT, text="Read the ")
    turn.add(EventType.REASONING_DELTA, "span_it1", ROOT, text="file first.")
    turn.add(EventType.REASONING, "span_it1", ROOT, text="Read the file first.")
    turn.add(EventType.CODE, "span_it1", ROOT, code="print(llm_query('hello'))")
    turn.add(EventType.TOOL_STARTED, "span_t1", "span_it1", call_id="c1", name="llm_query", arguments="'hello'")
    turn.add(EventType.TOOL_FINISHED, "span_t1", "span_it1", call_id="c1", name="llm_query", duration=0.25, error=None)
    turn.add(EventType.OUTPUT, "span_it1", ROOT, stream="stdout", text="partial ")
    turn.add(EventType.OUTPUT, "span_it1", ROOT, stream="stdout", text="line\nsecond\n")
    turn.add(
        EventType.CHILD_STARTED, "span_child", "span_it1", child_id="child_1", depth=1, task="Check north", files=[]
    )
    turn.add(EventType.ITERATION_STARTED, "span_cit", "span_child", iteration=1, max_iterations=3)
    turn.add(EventType.OUTPUT, "span_cit", "span_child", stream="stdout", text="child says hi\n")
    turn.add(
        EventType.CHILD_FINISHED,
        "span_child",
        "span_it1",
        child_id="child_1",
        depth=1,
        task="Check north",
        duration=1.5,
        outcome="completed",
        error=None,
        usage={"model_calls": 1, "input_tokens": 10, "output_tokens": 3, "iterations": 1},
        artifacts=[],
    )
    turn.add(EventType.ARTIFACT_CREATED, "span_it1", ROOT, path="artifacts/out.csv", size=2048)
    turn.add(EventType.WARNING, ROOT, message="iteration budget reached")
    turn.add(
        EventType.TURN_COMPLETED,
        answer="**north** wins",
        answer_source="submitted",
        unverified=False,
        unverified_reason=None,
        usage=USAGE,
        artifacts=[{"path": "artifacts/out.csv", "size": 2048, "sha256": "ab"}],
    )
    return turn
