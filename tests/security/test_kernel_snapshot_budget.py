"""A kernel snapshot is copied out at most at its budget, however the file grows while the host copies it.

Code left running in a session's kernel watches ``.kernel/`` with inotify and, the moment the host
opens the snapshot, appends 200 MiB of dense bytes to it (no hole: the sparse check cannot refuse it,
only the bounded read): through a real ``fleet serve`` with the scripted model, the host stores
nothing over the budget, logs why, and after a restart the fresh kernel says the state was lost. A
session with an ordinary snapshot, beside it, gets its variables back.
"""

from __future__ import annotations

from pathlib import Path

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from tests.kernels.conftest import events_of, run_turn

from .api_server import StartServer, fleet_serve, http, serve_env
from .test_copy_out import MIB, allocated

__all__ = ["fleet_serve", "serve_env"]

WATCHER = """
import ctypes, os, struct
libc = ctypes.CDLL(None, use_errno=True)
watch = libc.inotify_init1(0)
assert libc.inotify_add_watch(watch, b'.kernel', 0x20 | 0x1) >= 0  # IN_OPEN | IN_ACCESS
print('watching', flush=True)
while True:
    data = os.read(watch, 65536)
    at = 0
    while at < len(data):
        _, _, _, size = struct.unpack_from('iIII', data, at)
        name = data[at + 16:at + 16 + size].rstrip(b'\\0')
        at += 16 + size
        if name == b'snapshot.pickle':  # the kernel writes a temporary file; only the host opens this
            dense = b'g' * (1024 * 1024)  # real bytes, no hole: the sparse check cannot refuse them
            with open('.kernel/snapshot.pickle', 'ab', buffering=0) as grown:
                for _ in range(200):
                    grown.write(dense)
            raise SystemExit
"""
GROW_ON_OPEN = f"""
import os, subprocess, sys
payload = b'p' * (60 * 1024 * 1024)
os.makedirs('.kernel', exist_ok=True)
# A process of its own, left running in the kernel's sandbox: no lock of the kernel's delays it.
watcher = subprocess.Popen([sys.executable, '-c', {WATCHER!r}], stdout=subprocess.PIPE, text=True)
assert watcher.stdout.readline() == 'watching\\n'
SUBMIT(answer='watching')
"""


def test_a_snapshot_grown_while_the_host_copies_it_is_never_stored_past_its_budget(
    fleet_serve: StartServer, model_server: ScriptedModelServer, home: Path, tmp_path: Path
) -> None:
    """The watcher and the host's copy race: the watcher almost always grows the file before the copy
    reaches its end, and the snapshot is refused (its state reported lost after a restart); on a
    loaded machine the copy may finish first, and the snapshot the kernel wrote, within its budget, is
    kept. Either way nothing past the budget is ever stored."""
    first = fleet_serve(FLEET_SANDBOX_KERNEL_SNAPSHOT_MB="64")
    model_server.script_for_task("root", "grow", rlm_step("Watch.", GROW_ON_OPEN))
    model_server.script_for_task("root", "keep", rlm_step("Keep.", "rows = [1, 2, 3]\nSUBMIT(answer='kept')"))
    with http(first) as client:
        client.post("/sessions", json={"name": "evil"})
        client.post("/sessions", json={"name": "good"})
        assert run_turn(client, "evil", "grow")["answer"] == "watching"
        assert run_turn(client, "good", "keep")["answer"] == "kept"
        evil = client.get("/sessions/evil/kernel").json()  # waits for the snapshot to be taken
        good = client.get("/sessions/good/kernel").json()
    assert allocated(home / "sessions") < 65 * MIB  # the budget and its framing, never the 260 MiB
    refused = evil["snapshot"] is None
    if refused:
        assert allocated(home / "sessions") < MIB  # nothing of the 60 MiB taken
    assert good["snapshot"]["saved"] == ["rows"]
    first.stop()
    assert ("while it was copied out" in (tmp_path / "serve-0.log").read_text()) is refused

    second = fleet_serve(FLEET_SANDBOX_KERNEL_SNAPSHOT_MB="64")
    model_server.script_for_task("root", "look", rlm_step("Look.", "SUBMIT(answer=str('payload' in globals()))"))
    model_server.script_for_task("root", "sum", rlm_step("Sum.", "SUBMIT(answer=str(sum(rows)))"))
    with http(second) as client:
        looked = run_turn(client, "evil", "look")
        summed = run_turn(client, "good", "sum")

    assert looked["status"] == "completed" and looked["answer"] == str(not refused)
    [restored] = events_of(looked, "kernel.restored")
    if refused:
        assert restored["restored"] == []
        assert {"name": "payload", "reason": "no snapshot holds it"} in restored["lost"]
    else:
        assert "payload" in restored["restored"]
    assert summed["status"] == "completed" and summed["answer"] == "6"
    [kept] = events_of(summed, "kernel.restored")
    assert kept["restored"] == ["rows"]
