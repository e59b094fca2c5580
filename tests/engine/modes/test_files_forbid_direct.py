"""``direct`` cannot see files: a turn with files or context paths never takes it."""

from __future__ import annotations

from fleet_rlm.models.scripted import fields_reply, rlm_step
from fleet_rlm.protocol.events import EventType

from ..conftest import Harness
from .conftest import run_turn, selected, warnings

REFUSAL = "mode direct cannot see workspace files and this turn has files; use mode hybrid, rlm or flex"


def test_strict_direct_with_workspace_files_is_refused_before_any_model_call(harness: Harness) -> None:
    run = run_turn(harness, "Summarise the notes", files={"notes.txt": "hello"}, mode="direct")
    assert run.outcome.status == "failed"
    assert run.outcome.error == REFUSAL
    assert run.events[-1].type is EventType.TURN_FAILED and run.events[-1].data["reason"] == REFUSAL
    assert run.outcome.usage["model_calls"] == 0 and not harness.server.model.requests
    assert not run.of(EventType.ROUTE_SELECTED)


def test_strict_direct_naming_context_paths_is_refused(harness: Harness) -> None:
    run = run_turn(harness, "What is in it?", mode="direct", context_paths=["artifacts/report.md"])
    assert run.outcome.status == "failed"
    assert run.outcome.error == REFUSAL


def test_triage_choosing_direct_for_a_turn_with_files_is_overridden_to_rlm(harness: Harness) -> None:
    harness.server.script("sub", fields_reply(route="direct", reason="Looks like chat."))
    harness.server.script("root", rlm_step("Read it.", "SUBMIT(answer=open('files/notes.txt').read())"))
    run = run_turn(harness, "Summarise the notes", files={"notes.txt": "hello"}, mode="hybrid")

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "hello"
    choice = selected(run)
    assert choice["route"] == "rlm"
    assert choice["reason"] == "the turn has files, which direct cannot see (triage: Looks like chat.)"
    assert warnings(run) == ["triage chose direct, which cannot see the workspace files; using the rlm route"]
    assert run.outcome.route == "rlm"
