from __future__ import annotations

import asyncio
from typing import Any

from fleet_rlm.engine.turn import HistoryEntry, TurnRequest, build_turn
from fleet_rlm.protocol.events import Event, EventType

from ..conftest import Harness, TurnRun


def run_turn(
    harness: Harness,
    task: str,
    *,
    files: dict[str, str] | None = None,
    mode: str | None = None,
    context_paths: list[str] | None = None,
    history: list[tuple[str, str]] | None = None,
    settings: dict[str, Any] | None = None,
) -> TurnRun:
    """One turn with the per-turn fields ``Harness.run`` does not take (mode, context paths, history)."""
    events: list[Event] = []
    request = TurnRequest(
        task=task,
        workspace=harness.workspace(files),
        mode=mode,
        context_paths=list(context_paths or []),
        history=[HistoryEntry(message, answer) for message, answer in history or []],
    )
    turn = build_turn(harness.settings(**(settings or {})), request, events.append)
    outcome = asyncio.run(turn.run())
    return TurnRun(outcome, events, turn.workspace.root)


def selected(run: TurnRun) -> dict[str, Any]:
    """The data of the turn's single route.selected event."""
    events = run.of(EventType.ROUTE_SELECTED)
    assert len(events) == 1, [e.data for e in events]
    return events[0].data


def warnings(run: TurnRun) -> list[str]:
    return [str(e.data["message"]) for e in run.of(EventType.WARNING)]


def prompt(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content")) for m in request["messages"])
