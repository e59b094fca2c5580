"""Each route answering a turn on its own (strict modes), and what the turn records about it."""

from __future__ import annotations

from fleet_rlm.models.scripted import fields_reply, rlm_step
from fleet_rlm.protocol.events import EventType

from ..conftest import Harness
from .conftest import prompt, run_turn, selected

NOTES = "The launch code is 7421.\nThe backup code is 1138.\n"


def test_direct_answers_from_the_history_without_code_or_files(harness: Harness) -> None:
    harness.server.script("root", fields_reply(reasoning="They greet me and ask about Paris.", answer="Hi! Paris."))
    run = run_turn(
        harness, "Hello again, what did I ask before?", mode="direct", history=[("Capital of France?", "Paris.")]
    )

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "Hi! Paris."
    assert selected(run) == {"route": "direct", "reason": "mode direct was requested", "mode": "direct"}
    assert run.outcome.route == "direct" and run.outcome.usage["route"] == "direct"
    assert run.events[0].data["mode"] == "direct"
    # Reasoning streams in pieces, then arrives whole; no code, no sandbox.
    deltas = "".join(str(e.data["text"]) for e in run.of(EventType.REASONING_DELTA))
    assert deltas.strip() == "They greet me and ask about Paris."
    assert [e.data["text"] for e in run.of(EventType.REASONING)] == ["They greet me and ask about Paris."]
    assert not run.of(EventType.CODE) and not run.of(EventType.OUTPUT) and not run.of(EventType.TOOL_STARTED)
    (request,) = harness.server.model.requests_for("root")
    assert "Capital of France?" in prompt(request)
    assert "workspace" not in prompt(request).lower()
    usage = run.outcome.usage
    assert (usage["model_calls"], usage["root_calls"], usage["sub_calls"]) == (1, 1, 0)
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0


def test_direct_without_streaming_still_reports_its_reasoning(harness: Harness) -> None:
    harness.server.script("root", fields_reply(reasoning="Simple.", answer="42"))
    run = run_turn(harness, "What is six times seven?", mode="direct", settings={"lm_stream": False})
    assert run.outcome.answer == "42"
    assert not run.of(EventType.REASONING_DELTA)
    assert [e.data["text"] for e in run.of(EventType.REASONING)] == ["Simple."]


def test_flex_answers_from_the_files_its_module_reads_in_the_sandbox(harness: Harness) -> None:
    harness.server.script("root", fields_reply(reasoning="The notes state it.", answer="The launch code is 7421."))
    run = run_turn(harness, "What is the launch code?", files={"notes.txt": NOTES}, mode="flex")

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "The launch code is 7421."
    assert selected(run)["route"] == "flex"
    assert run.outcome.route == "flex"
    # The module's own code read the file (relative to the sandbox's working directory, the workspace).
    (request,) = harness.server.model.requests_for("root")
    assert "## files/notes.txt\nThe launch code is 7421." in prompt(request)
    # Its predictor ran on the host through the sandbox's tool bridge, reported like any tool call.
    tools = [e.data["name"] for e in run.of(EventType.TOOL_FINISHED)]
    assert tools == ["__dspy_construct__", "__dspy_call__"]
    assert all(e.data["error"] is None for e in run.of(EventType.TOOL_FINISHED))
    assert "class FleetTaskModule" in run.of(EventType.CODE)[0].data["code"]
    assert [e.data["text"] for e in run.of(EventType.REASONING)] == ["The notes state it."]
    usage = run.outcome.usage
    assert (usage["model_calls"], usage["root_calls"], usage["sub_calls"]) == (1, 1, 0)
    assert usage["input_tokens"] > 0 and usage["sandbox_errors"] == 0


def test_rlm_answers_with_code(harness: Harness) -> None:
    harness.server.script("root", rlm_step("Read it.", "SUBMIT(answer=open('files/notes.txt').read().split()[-1])"))
    run = run_turn(harness, "Backup code?", files={"notes.txt": NOTES}, mode="rlm")
    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "1138."
    assert selected(run) == {"route": "rlm", "reason": "mode rlm was requested", "mode": "rlm"}
    assert run.outcome.usage["route"] == "rlm" and run.outcome.usage["iterations"] == 1


def test_the_turn_mode_overrides_the_settings_mode(harness: Harness) -> None:
    harness.server.script("root", fields_reply(reasoning="Easy.", answer="Hello."))
    run = run_turn(harness, "Hi", mode="direct", settings={"mode": "rlm"})
    assert run.outcome.answer == "Hello."
    assert selected(run)["route"] == "direct"


def test_the_settings_mode_applies_when_the_turn_names_none(harness: Harness) -> None:
    harness.server.script("root", fields_reply(reasoning="Easy.", answer="Hello."))
    run = run_turn(harness, "Hi", settings={"mode": "direct"})
    assert selected(run)["mode"] == "direct"
    assert run.events[0].data["mode"] == "direct"


def test_an_unknown_mode_fails_the_turn_and_names_the_modes(harness: Harness) -> None:
    run = run_turn(harness, "Hi", mode="fast")
    assert run.outcome.status == "failed"
    assert run.outcome.error == "unknown mode 'fast': use one of hybrid, rlm, flex, direct"
    assert run.outcome.usage["model_calls"] == 0
    assert run.outcome.route is None and not run.of(EventType.ROUTE_SELECTED)
