"""Session kernels run on real sandboxes behind the real API server; storage is not what these tests
are about, so they run on SQLite only (the store's own tests cover PostgreSQL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from fleet_rlm.models.scripted import ScriptedModelServer


@pytest.fixture
def settings_defaults(tmp_path: Path) -> dict[str, Any]:
    """What this directory's ``make_settings`` sets before a test's own overrides."""
    return {
        "database_url": f"sqlite+aiosqlite:///{tmp_path / 'fleet.db'}",
        "sandbox_pool_size": 0,
        "sse_heartbeat_seconds": 15,
    }


def run_turn(http: httpx.Client, session: str, message: str) -> dict[str, Any]:
    """Submit a turn and wait for its end; returns the stored turn with its events' types and data."""
    turn = http.post(f"/sessions/{session}/turns", json={"message": message})
    assert turn.status_code == 202, turn.text
    return run_turn_id(http, turn.json()["id"])


def run_turn_id(http: httpx.Client, turn_id: str) -> dict[str, Any]:
    """Wait for the end of a submitted turn; returns it stored, with its events' types and data."""
    events: list[dict[str, Any]] = []
    with http.stream("GET", f"/turns/{turn_id}/events") as stream:
        from fleet_rlm.testing.sse import event_frames

        for frame in event_frames(stream):
            events.append(frame.json())
            if frame.event.startswith("turn.") and frame.event != "turn.started":
                break
    stored = http.get(f"/turns/{turn_id}").json()
    stored["events"] = events
    return stored


def events_of(turn: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [event["data"] for event in turn["events"] if event["type"] == kind]


def root_prompt(model_server: ScriptedModelServer) -> str:
    """The text of the last request the root model received."""
    request = model_server.model.requests_for("root")[-1]
    return "\n".join(str(message.get("content")) for message in request["messages"])
