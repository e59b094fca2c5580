"""Following a turn through a real server when the connection drops mid-stream."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from fleet_rlm.clients.terminal.client import ChatClient
from fleet_rlm.clients.terminal.status import StatusLine
from fleet_rlm.clients.terminal.stream import follow_streamed_turn, follow_turn, resilient_events
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import EventType
from fleet_rlm.testing.proxy import CuttableProxy
from fleet_rlm.testing.settings import scripted_settings
from tests.api.server import RunningServer, ServerProcess, server_in_thread

TWO_PARTS = "print('part one', flush=True)\nimport time\ntime.sleep(1.5)\nprint('part two')\nSUBMIT(answer='done')"


@pytest.fixture
def api(model_server: ScriptedModelServer, home: Path) -> Iterator[RunningServer]:
    settings = scripted_settings(model_server, home, mode="rlm", sandbox_pool_size=1)
    with server_in_thread(settings) as server:
        yield server


@dataclass
class NotedStatus(StatusLine):
    """A status line that keeps every note it was shown."""

    shown: list[str] = field(default_factory=list)

    def __setattr__(self, name: str, value: object) -> None:
        if name == "note" and value:
            self.shown.append(str(value))
        super().__setattr__(name, value)


@pytest.fixture
def proxy(api: RunningServer) -> Iterator[CuttableProxy]:
    port = int(api.base_url.rsplit(":", 1)[1])
    created = CuttableProxy(port)
    yield created
    created.close()


def test_a_dropped_stream_resumes_after_the_last_event_seen(
    proxy: CuttableProxy, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Two parts.", TWO_PARTS))
    with ChatClient(proxy.url) as client:
        session = client.create_session()
        turn = client.submit_turn(session["id"], "Two parts")
        status = NotedStatus()
        seen = []
        for event in resilient_events(client, turn["id"], status):
            seen.append(event)
            if event.type is EventType.OUTPUT and "part one" in event.data["text"]:
                threading.Timer(0.2, proxy.cut).start()
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1)), "nothing missed, nothing repeated"
    last_before_the_cut = next(e.seq for e in seen if e.type is EventType.OUTPUT)
    assert status.shown and status.shown[0].startswith("reconnecting (attempt 1, from event "), status.shown
    assert int(status.shown[0].rsplit(" ", 1)[1].rstrip(")")) >= last_before_the_cut
    assert status.note == "", "the note goes once the events flow again"
    assert seen[-1].type is EventType.TURN_COMPLETED
    assert [e.data["text"] for e in seen if e.type is EventType.OUTPUT] == ["part one\n", "part two\n"]
    assert proxy.connections >= 2


def test_follow_turn_renders_a_dropped_stream_once(proxy: CuttableProxy, model_server: ScriptedModelServer) -> None:
    model_server.script("root", rlm_step("Two parts.", TWO_PARTS))
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None)
    with ChatClient(proxy.url) as client:
        session = client.create_session()
        turn = client.submit_turn(session["id"], "Two parts")
        threading.Timer(1.0, proxy.cut).start()
        terminal = follow_turn(client, console, turn["id"])
    assert terminal is not None and terminal.type is EventType.TURN_COMPLETED
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert lines.count("part one") == 1 and lines.count("part two") == 1
    assert lines.count("Two parts.") == 1
    assert lines.count("print('part one', flush=True)") == 1
    assert proxy.connections >= 2


def cut_once_shown(proxy: CuttableProxy, out: io.StringIO, text: str) -> None:
    """Cut the connection 0.2 s after ``text`` was printed (so some events came before the cut)."""
    deadline = time.monotonic() + 60
    while text not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    proxy.cut()


def test_a_streamed_submission_cut_midway_renders_once_resuming_by_the_get(
    proxy: CuttableProxy, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Two parts.", TWO_PARTS))
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None)
    sent: list[httpx.Request] = []
    with ChatClient(proxy.url) as client:
        session = client.create_session()
        client.http.event_hooks = {"request": [sent.append], "response": []}
        with client.stream_turn(session["id"], "Two parts") as turn:
            threading.Thread(target=cut_once_shown, args=(proxy, out, "part one"), daemon=True).start()
            terminal = follow_streamed_turn(client, console, turn)
    assert terminal is not None and terminal.type is EventType.TURN_COMPLETED
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert lines.count("part one") == 1 and lines.count("part two") == 1
    assert lines.count("Two parts.") == 1
    assert [r.method for r in sent if r.url.path.endswith("/turns")] == ["POST"]
    resumed = [r for r in sent if r.url.path == f"/api/v1/turns/{turn.turn_id}/events"]
    assert resumed and int(resumed[0].headers["last-event-id"]) > 0, "the GET resumes after the streamed events"


def test_a_server_restart_mid_turn_resumes_the_stream_to_the_interrupted_end(
    model_server: ScriptedModelServer, home: Path, tmp_path: Path
) -> None:
    env = {
        "FLEET_HOME": str(home),
        "FLEET_LM_MODEL": "openai/root",
        "FLEET_LM_BASE_URL": model_server.base_url,
        "FLEET_LM_API_KEY": "x",
        "FLEET_SUB_LM_MODEL": "openai/sub",
        "FLEET_MODE": "rlm",
        "FLEET_SANDBOX_POOL_SIZE": "1",
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    server = ServerProcess(env, tmp_path / "server.log").start()
    slow = "print('slow work started', flush=True)\nimport time\ntime.sleep(60)"
    model_server.script("root", rlm_step("Slow.", slow))
    try:
        with ChatClient(server.base_url) as client:
            session = client.create_session()
            turn = client.submit_turn(session["id"], "Slow")
            status = StatusLine()
            seen = []
            for event in resilient_events(client, turn["id"], status):
                seen.append(event)
                if event.type is EventType.OUTPUT and "slow work started" in event.data["text"]:
                    server.kill()
                    server.start()
    finally:
        server.stop()
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert seen[-1].type is EventType.TURN_INTERRUPTED
