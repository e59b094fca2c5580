"""Host-side resources sandbox code can drive, end to end through ``fleet run`` with the scripted model:
a flood of tool calls whose answers are never read, and reply lines written while no execution runs
(as a thread left in a kernel does between turns), stay bounded in the host's threads and memory."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from fleet_rlm.models.scripted import Reply, ScriptedModelServer, rlm_step
from fleet_rlm.sandbox.tool_workers import MAX_TOOL_CALLS_AT_ONCE
from fleet_rlm.testing.cli import FLEET, json_events, scripted_env

from .test_sandbox_limits import environment

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="the host's bounds are about a host running as root")

# The worker's own objects, found the way hostile code would: its channel to the host and its session.
WORKER_OBJECTS = r"""
import _thread, ctypes, gc, json, os, sys, threading
channel = next(o for o in gc.get_objects() if type(o).__name__ == "Channel")
session = next(o for o in gc.get_objects() if type(o).__name__ == "Session")
def raw(message):
    os.write(channel._reply_fd, (json.dumps(message) + "\n").encode())
"""

# The worker's reader is stuck (its lock held), so the host's answers fill the command pipe; then 3000
# tool calls go straight onto the reply pipe, each naming an unknown tool of 4 KB (whose name the host's
# error repeats: the command pipe is full after a few hundred answers).
TOOL_CALL_FLOOD = (
    WORKER_OBJECTS
    + r"""
held = _thread.allocate_lock()
held.acquire()
channel._pending_lock = held
for number in range(1, 3001):
    raw({"type": "tool_call", "id": -number, "execution": session.execution, "name": "x" * 4096, "args": [], "kwargs": {}})
"""
)

# A thread that waits until the execution is over (the worker's main thread waits for the next command),
# writes 400 replies of 1 MB nobody asked for, then names itself so the test sees it is done (and waits
# for the next execution, so the name stays).
FLOOD_MB = 400


def idle_reply_flood(first: str = "True", *, setup: str = "") -> str:
    """The flood's code: ``setup`` runs first, then the thread waits for ``first`` to hold and for the
    worker's idle wait."""
    return (
        WORKER_OBJECTS
        + setup
        + rf"""
import time
def idle():
    return sys._current_frames()[threading.main_thread().ident].f_code.co_name == "next_command"
def flood():
    while not ({first}):
        time.sleep(0.01)
    while not idle():
        time.sleep(0.01)
    for _ in range({FLOOD_MB}):
        raw({{"type": "result", "execution": 0, "status": "ok", "value": "x" * (1024 * 1024)}})
    ctypes.CDLL(None).prctl(15, b"flood-done")  # PR_SET_NAME
    release.wait()
release = threading.Event()
flooder = threading.Thread(target=flood)
flooder.start()
"""
    )


IDLE_REPLY_FLOOD = idle_reply_flood()


def status_field(pid: int, name: str) -> int:
    """A number of /proc/PID/status (Threads, VmRSS in kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {name} in /proc/{pid}/status")


def thread_named(name: str) -> bool:
    for comm in Path("/proc").glob("[0-9]*/task/*/comm"):
        try:
            if comm.read_text().strip() == name:
                return True
        except OSError:
            continue
    return False


def start_run(task: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    with (cwd / "stdout").open("w") as stdout, (cwd / "stderr").open("w") as stderr:
        return subprocess.Popen(
            [*FLEET, "run", task, "--json"], cwd=cwd, env=environment(cwd, env), stdout=stdout, stderr=stderr, text=True
        )


def finished(process: subprocess.Popen[str], cwd: Path) -> list[dict[str, Any]]:
    assert process.returncode == 0, (cwd / "stderr").read_text()
    return json_events((cwd / "stdout").read_text())


def test_a_tool_call_flood_takes_a_few_host_threads(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    model_server.script(
        "root",
        rlm_step("Flood the host with tool calls.", TOOL_CALL_FLOOD),
        rlm_step("Report.", "SUBMIT(answer='carried on')"),
    )
    process = start_run("Flood", tmp_path, scripted_env(model_server, execution_timeout="4"))
    bound = 32 + MAX_TOOL_CALLS_AT_ONCE  # its own threads are under two dozen; one per call would be thousands
    peak = 0
    while process.poll() is None and peak < bound:  # sample the host's threads for as long as it runs
        try:
            peak = max(peak, status_field(process.pid, "Threads"))
        except (OSError, AssertionError):
            break  # the process just ended
    if peak >= bound:
        process.kill()
    process.wait(timeout=120)
    assert peak < bound, f"the host ran {peak} threads for one sandbox's tool calls"
    events = finished(process, tmp_path)
    # The stuck sandbox was stopped at its execution's deadline (its result could not get past the calls
    # queued ahead of it, nor the host's answers past its stuck reader); a fresh one carried on.
    [cause] = [event["data"]["cause"] for event in events if event["type"] == "sandbox.restarted"]
    assert cause in (
        "the code ran past the 4s timeout and did not stop when interrupted",
        "it stopped reading the host's messages",
    ), cause
    assert events[-1]["type"] == "turn.completed" and events[-1]["data"]["answer"] == "carried on"


def test_replies_written_while_no_execution_runs_are_not_kept(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    process: list[subprocess.Popen[str]] = []
    memory_kb: dict[str, int] = {}

    def before(_: dict[str, Any]) -> str:
        memory_kb["before"] = status_field(process[0].pid, "VmRSS")
        return rlm_step("Leave a thread writing replies.", IDLE_REPLY_FLOOD)

    def after_the_flood(_: dict[str, Any]) -> Reply:
        deadline = time.monotonic() + 60
        while not thread_named("flood-done"):  # the model's call is the window nobody reads replies in
            assert time.monotonic() < deadline, "the sandbox's thread never finished its flood"
        memory_kb["after"] = status_field(process[0].pid, "VmRSS")
        return Reply(text=rlm_step("Report.", "release.set()\nflooder.join()\nSUBMIT(answer='carried on')"))

    model_server.script("root", before, after_the_flood)
    process.append(start_run("Idle flood", tmp_path, scripted_env(model_server)))
    process[0].wait(timeout=120)
    events = finished(process[0], tmp_path)
    assert events[-1]["type"] == "turn.completed" and events[-1]["data"]["answer"] == "carried on"
    grown_mb = (memory_kb["after"] - memory_kb["before"]) / 1024
    assert grown_mb < FLOOD_MB / 4, f"the host kept {grown_mb:.0f} MB of a {FLOOD_MB} MB flood"
