"""Every event of real turns (real server, real sandboxes, scripted model) keeps the published schema.

Each HTTP scenario streams one turn over the API and checks every ``data:`` line, heartbeats included,
against docs/events.schema.json and the protocol's models; the service scenarios check the stored
events of turns a client cannot stream to the end (interrupted, cancelled while queued). Together
the scenarios show every event type.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from fleet_rlm.models.scripted import Reply, ScriptedModelServer, fields_reply, rlm_step
from fleet_rlm.protocol.events import TERMINAL_TYPES, EventType
from fleet_rlm.service.service import FleetService
from fleet_rlm.store import Database, Store
from fleet_rlm.store.runners import this_host
from fleet_rlm.testing.settings import SettingsFactory
from tests.api.server import RunningServer, server_in_thread
from tests.service.test_lifecycle import a_turn_running_and_one_waiting

from .conftest import schema_errors, sse_frames

E = EventType
SLOW = "print('started', flush=True)\nimport time\ntime.sleep(30)\nSUBMIT(answer='too late')"


@dataclass(frozen=True)
class Scenario:
    name: str
    script: Callable[[ScriptedModelServer], None]
    turn: dict[str, Any]
    shows: frozenset[EventType]
    files: dict[str, bytes] = field(default_factory=dict)
    cancel_after_output: str | None = None
    earlier: tuple[dict[str, Any], ...] = ()
    """Turns of the same session run to their end first (not checked)."""
    restart_kernel: bool = False
    """Restart the session's kernel after the earlier turns."""


def _rlm(server: ScriptedModelServer) -> None:
    server.model.default = lambda request: "hi from the sub-model"
    first = rlm_step("Ask, then divide.", "print(llm_query('say hi'))\n1/0")
    server.script(
        "root",
        Reply(text=first, delay=0.5),  # a quiet stream gets heartbeats
        rlm_step(
            "Save it.",
            "open('artifacts/out.txt', 'w').write('ok')\nremember('out.txt says ok', 'saved it')\nSUBMIT(answer='saved')",
        ),
    )


def _extracted(server: ScriptedModelServer) -> None:
    server.script("root", rlm_step("Look.", "print(sum([1, 2, 3]))"), fields_reply(answer="The total is 6."))


def _children(server: ScriptedModelServer) -> None:
    parent = """results = spawn_agents([{'task': 'child ok'}, {'task': 'child broken'}])
SUBMIT(answer=' / '.join(str(r['status']) for r in results))"""
    server.script_for_task("root", "PARENT", rlm_step("Two children.", parent))
    server.script_for_task("root", "child ok", rlm_step("Easy.", "SUBMIT(answer='done')"))
    server.script_for_task("root", "child broken", Reply(status=500, text="model exploded"))


def _failure(server: ScriptedModelServer) -> None:
    server.script("root", rlm_step("One.", "print(1)"), rlm_step("Two.", "SUBMIT(answer='too late')"))


def _incomplete(server: ScriptedModelServer) -> None:
    server.script("root", rlm_step("A.", "1/0"), rlm_step("B.", "open('files/missing.csv')"))


def _triage_to_direct(server: ScriptedModelServer) -> None:
    server.script("sub", fields_reply(route="direct", reason="A greeting."))
    server.script("root", fields_reply(reasoning="They greet me.", answer="Hello!"))


def _flex(server: ScriptedModelServer) -> None:
    server.script("root", fields_reply(reasoning="The notes state it.", answer="The code is 7421."))


def _restart(server: ScriptedModelServer) -> None:
    server.script("root", rlm_step("Crash.", "import os\nos._exit(3)"), rlm_step("Again.", "SUBMIT(answer='ok')"))


def _kernel(server: ScriptedModelServer) -> None:
    server.script("root", rlm_step("Define.", "rows = [1, 2]\nSUBMIT(answer='defined')"))
    server.script("root", rlm_step("Fresh.", "SUBMIT(answer=str('rows' in globals()))"))


def _slow(server: ScriptedModelServer) -> None:
    server.script("root", rlm_step("Slow.", SLOW))


SCENARIOS = [
    Scenario(
        "rlm",
        _rlm,
        {"message": "Say hi, then save", "mode": "rlm"},
        frozenset(
            {
                E.TURN_STARTED,
                E.ROUTE_SELECTED,
                E.ITERATION_STARTED,
                E.REASONING_DELTA,
                E.CODE_DELTA,
                E.REASONING,
                E.CODE,
                E.OUTPUT,
                E.TOOL_STARTED,
                E.TOOL_FINISHED,
                E.EXECUTION_FAILED,
                E.ARTIFACT_CREATED,
                E.MEMORY_PROPOSED,
                E.TURN_COMPLETED,
                E.HEARTBEAT,
            }
        ),
    ),
    Scenario(
        "extracted",
        _extracted,
        {"message": "Total", "mode": "rlm", "max_iterations": 1},
        frozenset({E.BUDGET_EXHAUSTED, E.WARNING, E.TURN_COMPLETED}),
    ),
    Scenario(
        "children",
        _children,
        {"message": "PARENT runs two children", "mode": "rlm"},
        frozenset({E.CHILD_STARTED, E.CHILD_FINISHED, E.TURN_COMPLETED}),
    ),
    Scenario(
        "failure",
        _failure,
        {"message": "Anything", "mode": "rlm", "max_model_calls": 1},
        frozenset({E.BUDGET_EXHAUSTED, E.TURN_FAILED}),
    ),
    Scenario(
        "incomplete",
        _incomplete,
        {"message": "Revenue", "mode": "rlm", "max_iterations": 2},
        frozenset({E.EXECUTION_FAILED, E.BUDGET_EXHAUSTED, E.TURN_INCOMPLETE}),
    ),
    Scenario(
        "direct",
        _triage_to_direct,
        {"message": "Hello there", "mode": "hybrid"},
        frozenset({E.ROUTE_SELECTED, E.REASONING_DELTA, E.REASONING, E.TURN_COMPLETED}),
    ),
    Scenario(
        "flex",
        _flex,
        {"message": "What is the code?", "mode": "flex"},
        frozenset({E.CODE, E.TOOL_STARTED, E.TOOL_FINISHED, E.REASONING, E.TURN_COMPLETED}),
        files={"notes.txt": b"The code is 7421.\n"},
    ),
    Scenario(
        "restart",
        _restart,
        {"message": "Crash once", "mode": "rlm"},
        frozenset({E.SANDBOX_RESTARTED, E.TURN_COMPLETED}),
    ),
    Scenario(
        "kernel",
        _kernel,
        {"message": "Is rows still there?", "mode": "rlm"},
        frozenset({E.KERNEL_EVICTED, E.KERNEL_STARTED, E.KERNEL_RESTORED, E.TURN_COMPLETED}),
        earlier=({"message": "Define rows", "mode": "rlm"},),
        restart_kernel=True,
    ),
    Scenario(
        "cancel",
        _slow,
        {"message": "Slow", "mode": "rlm"},
        frozenset({E.OUTPUT, E.TURN_CANCELLED}),
        cancel_after_output="started",
    ),
]
SERVICE_SHOWS = frozenset({E.TURN_INTERRUPTED, E.TURN_CANCELLED})


def test_the_scenarios_show_every_event_type() -> None:
    shown = set(SERVICE_SHOWS).union(*(scenario.shows for scenario in SCENARIOS))
    assert shown == set(EventType)


def cancel(api: RunningServer, turn_id: str) -> None:
    with api.http() as http:
        http.post(f"/turns/{turn_id}/cancel").raise_for_status()


def stream_turn(api: RunningServer, http: httpx.Client, scenario: Scenario) -> list[dict[str, str]]:
    """Submit the scenario's turn and read its event stream to the terminal event."""
    http.post("/sessions", json={"name": scenario.name}).raise_for_status()
    for name, data in scenario.files.items():
        http.post(f"/sessions/{scenario.name}/files", files={"file": (name, data)}).raise_for_status()
    for turn in scenario.earlier:
        earlier_id = http.post(f"/sessions/{scenario.name}/turns", json=turn).json()["id"]
        with http.stream("GET", f"/turns/{earlier_id}/events") as stream:
            for frame in sse_frames(stream.iter_lines()):
                if frame.get("event") in TERMINAL_TYPES:
                    break
    if scenario.restart_kernel:
        http.post(f"/sessions/{scenario.name}/kernel/restart").raise_for_status()
    submitted = http.post(f"/sessions/{scenario.name}/turns", json=scenario.turn)
    assert submitted.status_code == 202, submitted.text
    turn_id = submitted.json()["id"]
    frames: list[dict[str, str]] = []
    with http.stream("GET", f"/turns/{turn_id}/events") as stream:
        for frame in sse_frames(stream.iter_lines()):
            if "data" not in frame:
                continue  # the retry: advice
            frames.append(frame)
            if frame.get("event") in TERMINAL_TYPES:
                break
            output = frame["event"] == "output" and json.loads(frame["data"])["data"]["text"]
            if scenario.cancel_after_output and output and scenario.cancel_after_output in output:
                threading.Thread(target=cancel, args=(api, turn_id)).start()
    return frames


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_streamed_event_keeps_the_schema(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, scenario: Scenario
) -> None:
    scenario.script(model_server)
    with server_in_thread(make_settings()) as api, api.http() as http:
        frames = stream_turn(api, http, scenario)

    events = [json.loads(frame["data"]) for frame in frames]
    problems = {index: schema_errors(event) for index, event in enumerate(events)}
    assert not {i: p for i, p in problems.items() if p}, [events[i] for i, p in problems.items() if p]
    for frame, event in zip(frames, events, strict=True):
        assert frame["event"] == event["type"]
        assert frame.get("id") == (None if event["type"] == "heartbeat" else str(event["seq"]))
    shown = {EventType(event["type"]) for event in events}
    assert scenario.shows <= shown, f"missing: {sorted(scenario.shows - shown)}"
    assert events[-1]["type"] in TERMINAL_TYPES


async def stored_events(settings_url: str, turn_id: str) -> list[dict[str, Any]]:
    store = Store(Database(settings_url))
    try:
        return [event.to_dict() for event in await store.events_after(turn_id)]
    finally:
        await store.db.dispose()


def dead_runner() -> str:
    """A runner name of this host whose process has exited."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return f"{this_host()}:{process.pid}:gone"


@pytest.mark.anyio
async def test_turns_interrupted_or_cancelled_while_queued_keep_the_schema(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    settings = make_settings(max_running_turns=1)
    url = str(settings.database_url)
    service = FleetService(settings, database=Database(url))
    await service.start()
    running, queued = await a_turn_running_and_one_waiting(service, model_server)
    await service.turns.cancel(queued.id)
    assert (await service.turns.wait(queued.id)).status == "cancelled"
    await service.stop()  # the running turn is interrupted by the shutdown

    # A turn left running by a process that died is interrupted when the next one starts up.
    store = Store(Database(url))
    orphan, _ = await store.create_turn("waiting", "was running", runner=dead_runner())
    await store.mark_running(orphan.id)
    await store.db.dispose()
    restarted = FleetService(settings, database=Database(url))
    await restarted.start(run_turns=False)
    await restarted.stop()

    cancelled, shut_down, died = [await stored_events(url, t.id) for t in (queued, running, orphan)]
    for event in cancelled + shut_down + died:
        assert not schema_errors(event), event
    assert cancelled[-1]["type"] == "turn.cancelled" and cancelled[-1]["data"]["usage"] == {}
    assert shut_down[-1]["type"] == "turn.interrupted" and shut_down[-1]["data"]["usage"]["iterations"] == 1
    assert [e["type"] for e in died] == ["turn.interrupted"] and "usage" not in died[0]["data"]
