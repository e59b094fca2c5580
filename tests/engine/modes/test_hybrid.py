"""Hybrid mode: triage picks the route; errors and unusable answers fall back to rlm with a warning."""

from __future__ import annotations

import pytest

from fleet_rlm.models.scripted import Reply, fields_reply, rlm_step
from fleet_rlm.protocol.events import EventType

from ..conftest import Harness
from .conftest import prompt, run_turn, selected, warnings

ROUTE_ANSWERS = {
    "direct": fields_reply(reasoning="A greeting.", answer="Hello!"),
    "flex": fields_reply(reasoning="The note says so.", answer="Hello!"),
    "rlm": rlm_step("Answer.", "SUBMIT(answer='Hello!')"),
}


@pytest.mark.parametrize("route", ["direct", "flex", "rlm"])
def test_triage_picks_the_route(harness: Harness, route: str) -> None:
    harness.server.script("sub", fields_reply(route=route, reason=f"It suits {route}."))
    harness.server.script("root", ROUTE_ANSWERS[route])
    run = run_turn(harness, "Say hello", mode="hybrid", history=[("Who are you?", "Fleet.")])

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "Hello!"
    assert selected(run) == {"route": route, "reason": f"It suits {route}.", "mode": "hybrid"}
    assert run.outcome.route == route and not warnings(run)
    assert run.events[0].data["mode"] == "hybrid"
    # Triage is one sub-model call, counted like every other.
    assert (run.outcome.usage["sub_calls"], run.outcome.usage["root_calls"]) == (1, 1)
    (triage_request,) = harness.server.model.requests_for("sub")
    assert "Say hello" in prompt(triage_request) and "Who are you?" in prompt(triage_request)
    # The route.selected event comes before any of the route's own work.
    first_work = min(e.seq for e in run.events if e.type not in (EventType.TURN_STARTED, EventType.ROUTE_SELECTED))
    assert run.of(EventType.ROUTE_SELECTED)[0].seq < first_work


@pytest.mark.parametrize(
    ("label", "route"),
    [("RLM", "rlm"), ('"rlm".', "rlm"), ("**Flex**", "flex"), (" `direct` ", "direct"), ("Route: rlm\n", "rlm")],
)
def test_triage_reads_a_label_written_loosely(harness: Harness, label: str, route: str) -> None:
    """Seen with a real 1.5B model: a right label in another dress made triage fail and fall back."""
    harness.server.script("sub", fields_reply(route=label, reason="It fits."))
    harness.server.script("root", ROUTE_ANSWERS[route])
    run = run_turn(harness, "Say hello", mode="hybrid")

    assert run.outcome.status == "completed", run.outcome.error
    assert selected(run)["route"] == route and not warnings(run)


def test_triage_sees_the_workspace_manifest(harness: Harness) -> None:
    harness.server.script("sub", fields_reply(route="rlm", reason="A table to sum."))
    harness.server.script("root", rlm_step("Sum.", "SUBMIT(answer='3')"))
    run = run_turn(harness, "Total?", files={"sales.csv": "region,revenue\nnorth,1\nsouth,2\n"}, mode="hybrid")
    assert run.outcome.answer == "3"
    assert "files/sales.csv" in prompt(harness.server.model.requests_for("sub")[0])


@pytest.mark.parametrize(
    ("reply", "warning"),
    [
        pytest.param("Honestly, I would just answer it.", "triage failed (AdapterParseError", id="garbage"),
        pytest.param(fields_reply(route="chat", reason="Small talk."), "triage failed (NotARoute", id="label"),
        pytest.param(Reply(status=500, text="overloaded"), "triage failed (", id="endpoint-error"),
    ],
)
def test_an_unusable_triage_falls_back_to_rlm_with_a_warning(
    harness: Harness, reply: str | Reply, warning: str
) -> None:
    harness.server.script("sub", reply)
    harness.server.script("root", rlm_step("Answer.", "SUBMIT(answer='Hello!')"))
    run = run_turn(harness, "Say hello", mode="hybrid")

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "Hello!"
    assert selected(run)["route"] == "rlm"
    (message,) = warnings(run)
    assert message.startswith(warning) and message.endswith("; using the rlm route")
    assert "\n" not in message
    # One triage call, never retried through another adapter.
    assert run.outcome.usage["sub_calls"] == 1
