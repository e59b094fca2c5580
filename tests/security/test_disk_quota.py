"""The workspace volume bounds what a sandbox writes, all its processes together, through ``fleet run``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.sandbox.volume import quota_support
from fleet_rlm.testing.cli import json_events, run_fleet, scripted_env

FILL = """
import json, os, subprocess, sys
WRITER = '''
import json, sys
n, error = 0, None
try:
    with open(sys.argv[1], 'wb') as out:
        while True:
            out.write(b'x' * (1 << 20)); out.flush(); n += 1
except OSError as exc:
    error = exc.strerror
print(json.dumps([n, error]))
'''
def fill(name):
    # A process of its own for each file: the bound is the volume's, not one process's.
    return json.loads(subprocess.run([sys.executable, '-c', WRITER, name], capture_output=True, text=True).stdout)
found = {'artifacts': fill('artifacts/a.bin'), 'tmp': fill('tmp/b.bin')}
made, error = 0, None
try:
    for i in range(100_000):
        os.mkdir(f'tmp/d{i}')
        made += 1
except OSError as exc:
    error = exc.strerror
found['dirs'] = [made, error]
print(json.dumps(found))
SUBMIT(answer='filled')
"""


def test_a_sandbox_cannot_fill_the_host_disk_or_its_inodes(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    support = quota_support()
    if not support.available:
        pytest.skip(f"no disk quota on this machine: {support.reason}")
    model_server.script("root", rlm_step("Fill the disk.", FILL))
    free_before = shutil.disk_usage(tmp_path).free

    result = run_fleet(
        ["run", "Fill", "--json"], tmp_path, scripted_env(model_server, sandbox_disk_mb="48", sandbox_max_files="2000")
    )

    assert result.returncode == 0, result.stderr
    events = json_events(result.stdout)
    output = "".join(e["data"]["text"] for e in events if e["type"] == "output")
    found = json.loads(output.strip().splitlines()[-1])
    assert {error for _, error in found.values()} == {"No space left on device"}, found
    assert found["artifacts"][0] + found["tmp"][0] <= 48
    assert found["dirs"][0] < 2000
    assert events[-1]["type"] == "turn.completed"
    # The volume is gone with the run: no image or mount is left behind.
    assert list((tmp_path / "home" / "runs").iterdir()) == []
    assert shutil.disk_usage(tmp_path).free > free_before - 200 * 1024 * 1024
