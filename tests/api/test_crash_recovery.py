from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet_rlm.api.client import FleetClient
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import EventType
from fleet_rlm.testing.settings import scripted_env

from .server import ServerProcess

SLOW = "print('started', flush=True)\nimport time\ntime.sleep(60)"


@pytest.fixture
def server_env(model_server: ScriptedModelServer, home: Path, database_url: str) -> dict[str, str]:
    return scripted_env(model_server, home, database_url, FLEET_SANDBOX_POOL_SIZE="1", FLEET_MODE="hybrid")


@pytest.fixture
def processes() -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    yield started
    for process in started:
        process.stop()


def test_kill_9_mid_turn_then_restart_finds_it_interrupted_and_the_session_usable(
    server_env: dict[str, str],
    model_server: ScriptedModelServer,
    home: Path,
    tmp_path: Path,
    processes: list[ServerProcess],
) -> None:
    first = ServerProcess(server_env, tmp_path / "server.log")
    processes.append(first.start())
    with FleetClient(first.base_url) as client:
        client.create_session(name="sales")
        client.upload("sales", _write(tmp_path, "sales.csv", "a,b\n1,2\n"))
        model_server.script(
            "root", rlm_step("Save.", "open('artifacts/kept.txt','w').write('kept')\nSUBMIT(answer='saved')")
        )
        done = client.submit_turn("sales", "save something")
        assert [e.type for e in client.follow(done["id"])][-1] is EventType.TURN_COMPLETED

        model_server.script("root", rlm_step("Slow.", "open('artifacts/doomed.txt','w').write('x')\n" + SLOW))
        doomed = client.submit_turn("sales", "take forever")
        for event in client.follow(doomed["id"]):
            if event.type is EventType.OUTPUT and "started" in str(event.data["text"]):
                break
    sandboxes = home / "sandboxes"
    labels = [json.loads(p.read_text()) for p in sandboxes.glob("*/label.json")]
    doomed_sandbox = next(label["sandbox"] for label in labels if label.get("turn") == doomed["id"])

    assert processes_mentioning(doomed_sandbox), "the sandbox should be running before the crash"
    first.kill()
    deadline = time.monotonic() + 10
    while processes_mentioning(doomed_sandbox) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_mentioning(doomed_sandbox), "a sandbox outlived its server"

    second = ServerProcess(server_env, tmp_path / "server.log")
    processes.append(second.start())
    with FleetClient(second.base_url) as client:
        turn = client.turn(doomed["id"])
        assert turn["status"] == "interrupted"
        replay = list(client.follow(doomed["id"]))
        assert replay[0].type is EventType.TURN_STARTED
        assert any(e.type is EventType.OUTPUT and "started" in str(e.data["text"]) for e in replay)
        assert [e.type for e in replay if e.terminal] == [EventType.TURN_INTERRUPTED]
        assert [e.seq for e in replay] == list(range(1, len(replay) + 1))
        assert not (sandboxes / doomed_sandbox).exists()

        files = {f["path"] for f in client.files("sales")}
        assert files == {"files/sales.csv", "artifacts/kept.txt"}
        assert client.download("sales", "artifacts/kept.txt") == b"kept"

        model_server.script("root", rlm_step("Again.", "SUBMIT(answer=open('artifacts/kept.txt').read())"))
        retry = client.submit_turn("sales", "try again")
        assert [e.type for e in client.follow(retry["id"])][-1] is EventType.TURN_COMPLETED
        assert client.turn(retry["id"])["answer"] == "kept"
        prompt = str(model_server.model.requests_for("root")[-1]["messages"])
        assert "save something" in prompt and "take forever" in prompt
        assert [t["status"] for t in client.turns("sales")] == ["completed", "interrupted", "completed"]


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path
