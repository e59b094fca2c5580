"""Links, special files and ownership in sandbox-writable trees, end to end through ``fleet run``.

Sandbox code plants symlinks to a root-only host directory where the host later reads or writes
(child promotion in both directions, artifact records), FIFOs where it reads, and swaps entries
while the turn runs. The host must never follow, block, chown or reveal.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.cli import json_events, run_fleet, scripted_env

from .conftest import HostCanary


def run_json(server: ScriptedModelServer, tmp_path: Path, *args: str, **settings: str) -> list[dict[str, Any]]:
    result = run_fleet(["run", *args, "--json"], tmp_path, scripted_env(server, **settings))
    assert result.returncode == 0, result.stderr
    return json_events(result.stdout)


def warnings(events: list[dict[str, Any]]) -> str:
    return "\n".join(e["data"]["message"] for e in events if e["type"] == "warning")


def everything(events: list[dict[str, Any]], tmp_path: Path) -> list[str]:
    """Every event as text, plus the log file: what a person or an operator could ever read."""
    texts = [repr(e) for e in events]
    log = tmp_path / "home" / "logs" / "fleet.log"
    if log.exists():
        texts.append(log.read_text(errors="replace"))
    return texts


def test_a_child_whose_artifacts_dir_is_a_link_to_the_host_promotes_nothing(
    model_server: ScriptedModelServer, tmp_path: Path, canary: HostCanary
) -> None:
    parent = "r = spawn_agent('CHILD links its artifacts')\nprint(r['status'], r['artifacts'])\nSUBMIT(answer=str(r['artifacts']))"
    child = (
        f"import os, shutil\nshutil.rmtree('artifacts')\nos.symlink({str(canary.directory)!r}, 'artifacts')\n"
        "SUBMIT(answer='linked')"
    )
    model_server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    model_server.script_for_task("root", "CHILD links", rlm_step("Link.", child))
    workspace = tmp_path / "ws"

    events = run_json(model_server, tmp_path, "PARENT", "--workspace", str(workspace))

    assert events[-1]["type"] == "turn.completed"
    assert events[-1]["data"]["answer"] == "[]"
    assert "artifacts is a symbolic link" in warnings(events)
    canary.untouched()
    canary.absent_from(*everything(events, tmp_path), trees=[workspace, tmp_path / "home"])


def test_a_parent_that_links_artifacts_children_to_the_host_gets_nothing_written_there(
    model_server: ScriptedModelServer, tmp_path: Path, canary: HostCanary
) -> None:
    parent = (
        f"import os\nos.makedirs('artifacts', exist_ok=True)\nos.symlink({str(canary.directory)!r}, 'artifacts/children')\n"
        "r = spawn_agent('CHILD writes a module')\nprint(r['status'], r['artifacts'])\nSUBMIT(answer=r['status'])"
    )
    child = "open('artifacts/sitecustomize.py', 'w').write('PWNED = True')\nSUBMIT(answer='wrote')"
    model_server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    model_server.script_for_task("root", "CHILD writes", rlm_step("Write.", child))

    events = run_json(model_server, tmp_path, "PARENT")

    assert events[-1]["type"] == "turn.completed"
    assert "artifacts were not promoted: artifacts/children is a symbolic link" in warnings(events)
    canary.untouched()


def test_an_artifact_swapped_for_a_link_or_a_fifo_is_neither_read_nor_waited_on(
    model_server: ScriptedModelServer, tmp_path: Path, canary: HostCanary
) -> None:
    first = "open('artifacts/report.txt', 'w').write('my report')\nprint('written')"
    second = (
        f"import os\nos.remove('artifacts/report.txt')\nos.symlink({str(canary.secret)!r}, 'artifacts/report.txt')\n"
        "os.mkfifo('artifacts/pipe')\nos.mkfifo('files/input.fifo')\nSUBMIT(answer='swapped')"
    )
    model_server.script("root", rlm_step("Write.", first), rlm_step("Swap.", second))
    workspace = tmp_path / "ws"

    events = run_json(model_server, tmp_path, "Report", "--workspace", str(workspace))

    completed = events[-1]
    assert completed["type"] == "turn.completed"
    assert completed["data"]["artifacts"] == []  # the announced file is gone; the link is not it
    announced = [e["data"]["path"] for e in events if e["type"] == "artifact.created"]
    assert announced == ["artifacts/report.txt"]
    told = warnings(events)
    assert "artifacts/report.txt is a symbolic link" in told
    assert "artifacts/pipe is a FIFO" in told
    assert not (workspace / "artifacts" / "report.txt").exists()  # links are not brought home either
    assert not (workspace / "artifacts" / "pipe").exists()
    canary.untouched()
    canary.absent_from(*everything(events, tmp_path), trees=[workspace])


def test_the_host_never_chowns_and_the_workspace_stays_the_invoking_users(
    model_server: ScriptedModelServer, tmp_path: Path, canary: HostCanary
) -> None:
    # The code races renames of a directory against a link to the host while the turn goes on,
    # as an attacker would against a host walking the tree to chown it.
    racer = f"""
import os, threading, time
os.makedirs('artifacts/out', exist_ok=True)
open('artifacts/out/data.csv', 'w').write('a,b\\n1,2\\n')
os.symlink({str(canary.secret)!r}, 'files/secret-link')
stop = time.time() + 1.5
def swap():
    while time.time() < stop:
        try:
            os.rename('artifacts/out', 'artifacts/out.tmp')
            os.symlink({str(canary.directory)!r}, 'artifacts/out')
            os.remove('artifacts/out')
            os.rename('artifacts/out.tmp', 'artifacts/out')
        except OSError:
            pass
threading.Thread(target=swap).start()
print(os.getuid())
"""
    final = "import time\ntime.sleep(1.6)\nSUBMIT(answer='done')"
    model_server.script("root", rlm_step("Race.", racer), rlm_step("Finish.", final))
    workspace = tmp_path / "ws"
    (tmp_path / "input.csv").write_text("x\n1\n")

    events = run_json(model_server, tmp_path, "Race", "--file", "input.csv", "--workspace", str(workspace))

    assert events[-1]["type"] == "turn.completed"
    canary.untouched()
    me = os.getuid()
    entries = [workspace, *workspace.rglob("*")]
    assert {(path.lstat().st_uid, path.lstat().st_gid) for path in entries} == {(me, os.getgid())}
    assert (workspace / "artifacts" / "out" / "data.csv").read_text() == "a,b\n1,2\n"
    assert not (workspace / "files" / "secret-link").exists()
    assert os.stat(workspace).st_mode & 0o777 == 0o755
