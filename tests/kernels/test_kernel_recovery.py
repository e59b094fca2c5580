"""A server killed with SIGKILL loses its kernels; the restarted server restores each session's
picklable state into a fresh kernel and tells the model what is gone. A snapshot is sandbox data:
only the sandbox ever unpickles one, so a crafted snapshot runs its code in there, never on the host."""

from __future__ import annotations

import json
import pickle
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.settings import SettingsFactory, scripted_env
from tests.api.server import ServerProcess, server_in_thread
from tests.api.test_crash_recovery import processes_mentioning

from .conftest import events_of, root_prompt, run_turn

DEFINE = """import json as j
rows = [1, 2, 3]
_offset = 10
squares = {n: n * n for n in rows}
numbers = (n for n in rows)
SUBMIT(answer='defined')"""


@pytest.fixture
def server_env(model_server: ScriptedModelServer, home: Path, tmp_path: Path) -> dict[str, str]:
    return scripted_env(model_server, home, f"sqlite+aiosqlite:///{tmp_path / 'fleet.db'}")


@pytest.fixture
def processes() -> Iterator[list[ServerProcess]]:
    started: list[ServerProcess] = []
    yield started
    for process in started:
        process.stop()


def test_kill_9_then_restart_restores_picklable_state_and_lists_the_rest_as_lost(
    server_env: dict[str, str],
    model_server: ScriptedModelServer,
    home: Path,
    tmp_path: Path,
    processes: list[ServerProcess],
) -> None:
    first = ServerProcess(server_env, tmp_path / "server.log")
    processes.append(first.start())
    with httpx.Client(base_url=first.base_url + "/api/v1", timeout=30) as http:
        http.post("/sessions", json={"name": "s"})
        model_server.script("root", rlm_step("Define.", DEFINE))
        assert run_turn(http, "s", "define")["answer"] == "defined"
        kernel = http.get("/sessions/s/kernel").json()
        assert kernel["live"] and http.get("/health").json()["kernels"]["live"] == 1
    assert processes_mentioning(kernel["sandbox_id"]), "the kernel should be running"
    first.kill()
    deadline = time.monotonic() + 10
    while processes_mentioning(kernel["sandbox_id"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_mentioning(kernel["sandbox_id"]), "a kernel outlived its server"

    second = ServerProcess(server_env, tmp_path / "server.log")
    processes.append(second.start())
    with httpx.Client(base_url=second.base_url + "/api/v1", timeout=30) as http:
        status = http.get("/sessions/s/kernel").json()
        assert status["live"] is False and status["ended"] is None
        assert not (home / "sandboxes" / kernel["sandbox_id"]).exists()
        model_server.script(
            "root", rlm_step("Use.", "SUBMIT(answer=f'{sum(rows) + _offset} {squares[3]} {j.dumps(rows)}')")
        )
        turn = run_turn(http, "s", "use")
        assert turn["status"] == "completed", (turn["error"], turn["events"][-6:])
        assert turn["answer"] == "16 9 [1, 2, 3]"  # a name starting with _ is state like the rest
        [evicted] = events_of(turn, "kernel.evicted")
        assert evicted["reason"] == "server_restart" and evicted["at"] is None
        [restored] = events_of(turn, "kernel.restored")
        assert sorted(restored["restored"]) == ["_offset", "rows", "squares"]
        assert [item["name"] for item in restored["lost"]] == ["numbers"]
        assert restored["lost"][0]["reason"].startswith("not picklable")
        prompt = root_prompt(model_server)
        assert "lost because the server restarted" in prompt and "- numbers: not picklable" in prompt


class _RunsOnUnpickling:
    """Unpickling this calls ``exec(code)`` wherever it is unpickled."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return exec, (self.code,)


def test_a_crafted_snapshot_runs_its_code_inside_the_sandbox_never_on_the_host(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, home: Path, tmp_path: Path
) -> None:
    marker = Path("/tmp") / f"fleet-crafted-{uuid.uuid4().hex}"
    code = f"open({str(marker)!r}, 'w').write('ran here')"
    with server_in_thread(make_settings()) as api, api.http() as http:
        session = http.post("/sessions", json={"name": "s"}).json()["id"]
        model_server.script("root", rlm_step("Define.", "rows = [1]\nSUBMIT(answer='ok')"))
        assert run_turn(http, "s", "define")["answer"] == "ok"
        assert http.post("/sessions/s/kernel/restart").status_code == 200
        # The session's storage is tampered with: a snapshot whose unpickling runs code, and a state
        # that says it holds a variable.
        storage = home / "sessions" / session / "kernel"
        (storage / "snapshot.pickle").write_bytes(
            pickle.dumps({"variables": {"evil": pickle.dumps(_RunsOnUnpickling(code))}, "modules": {"os": "os"}})
        )
        state = json.loads((storage / "state.json").read_text())
        state["snapshot"] = {"saved": ["evil"], "lost": [], "bytes": 1, "at": 1.0}
        (storage / "state.json").write_text(json.dumps(state))

        model_server.script("root", rlm_step("Look.", f"SUBMIT(answer=open({str(marker)!r}).read())"))
        turn = run_turn(http, "s", "look")
        assert not marker.exists(), "the host unpickled a snapshot"
        assert turn["status"] == "completed" and turn["answer"] == "ran here"  # in the sandbox's own /tmp
        [restored] = events_of(turn, "kernel.restored")
        assert "evil" in restored["restored"]


def test_a_snapshot_the_sandbox_turns_into_a_link_is_not_taken(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, home: Path
) -> None:
    secret = home / "host-secret.txt"
    secret.write_text("host only")
    code = (
        "import os, shutil\nrows = [1]\nshutil.rmtree('.kernel', ignore_errors=True)\n"
        f"os.symlink({str(secret)!r}, '.kernel')\nSUBMIT(answer='ok')"
    )
    with server_in_thread(make_settings()) as api, api.http() as http:
        session = http.post("/sessions", json={"name": "s"}).json()["id"]
        model_server.script("root", rlm_step("Link.", code))
        assert run_turn(http, "s", "link")["answer"] == "ok"
        snapshot = home / "sessions" / session / "kernel" / "snapshot.pickle"
        assert not snapshot.exists()
        assert http.get("/sessions/s/kernel").json()["snapshot"] is None
        assert secret.read_text() == "host only"


@pytest.mark.parametrize(
    ("name", "replace"),
    [
        ("tmp", "open('tmp', 'w').write('not a directory')"),
        ("files", "os.symlink('/etc', 'files')"),
        ("artifacts", "os.mkfifo('artifacts')"),
    ],
)
def test_a_layout_directory_the_sandbox_replaces_is_made_again_for_the_next_turn(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, home: Path, name: str, replace: str
) -> None:
    """Sandbox code that swaps one of the workspace's directories for a file, a link or a pipe does not
    break its session's later turns (the kernel lives on), and the host never follows what it left."""
    code = f"import os, shutil\nrows = [1, 2]\nshutil.rmtree({name!r})\n{replace}\nSUBMIT(answer='replaced')"
    with server_in_thread(make_settings()) as api, api.http() as http:
        session = http.post("/sessions", json={"name": "s"}).json()["id"]
        http.post("/sessions/s/files", files={"file": ("data.txt", b"kept", "text/plain")}).raise_for_status()
        model_server.script("root", rlm_step("Replace.", code))
        assert run_turn(http, "s", "replace")["answer"] == "replaced"

        model_server.script(
            "root",
            rlm_step(
                "Look.",
                "import os\nSUBMIT(answer=f\"{sum(rows)} {open('files/data.txt').read()} "
                f'{{os.path.isdir({name!r}) and not os.path.islink({name!r})}}")',
            ),
        )
        turn = run_turn(http, "s", "look")
        assert (turn["status"], turn["answer"]) == ("completed", "3 kept True")  # the same kernel, repaired
        assert not events_of(turn, "kernel.evicted")
        assert (home / "sessions" / session).is_dir()
    assert not Path("/etc/data.txt").exists()  # the link was removed, not written through
