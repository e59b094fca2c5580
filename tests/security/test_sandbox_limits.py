"""Whole-sandbox limits, end to end through ``fleet run`` with the scripted model: code that tries to
take the host's memory, processes, CPU or kernel surface is stopped with a clear reason, and no
cgroup, mount or state directory outlives the sandbox, not even when the host is killed."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.sandbox.local import LocalSandboxBackend
from fleet_rlm.sandbox.protections import leftovers_of
from fleet_rlm.testing.cli import FLEET, json_events, scripted_env

from ..sandbox.limits_probes import (
    FILL_TMP_WITH_1GB,
    FORK_BOMB_COUNT,
    FOUR_BIG_PROCESSES,
    FOUR_SPINNERS,
    SOCKET_PROBE,
    SYSCALL_PROBE,
)

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="whole-sandbox limits are enforced when the host is root")


def needs(*names: str) -> None:
    rows = {row.name: row for row in LocalSandboxBackend().protections_report()}
    for name in names:
        if not rows[name].enforced:
            pytest.skip(f"{name} is not enforced on this machine: {rows[name].reason}")


def environment(cwd: Path, env: dict[str, str]) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    clean.update({"XDG_CONFIG_HOME": str(cwd / "config"), "FLEET_HOME": str(cwd / "home"), "COLUMNS": "120"})
    return {**clean, **env}


class Run:
    """One ``fleet run --json`` process: its pid, exit code, events and stderr."""

    def __init__(self, process: subprocess.Popen[str], stdout: str, stderr: str) -> None:
        self.pid = process.pid
        self.returncode = process.returncode
        self.events = json_events(stdout)
        self.stderr = stderr

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event["type"] == kind]

    @property
    def failure(self) -> str:
        return self.stderr.strip().splitlines()[-1]


def fleet_run(task: str, cwd: Path, env: dict[str, str]) -> Run:
    process = subprocess.Popen(
        [*FLEET, "run", task, "--json"],
        cwd=cwd,
        env=environment(cwd, env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = process.communicate(timeout=120)
    return Run(process, stdout, stderr)


def test_memory_is_bounded_for_all_processes_together(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    needs("memory cgroup")
    model_server.script(
        "root",
        rlm_step("Hold 1.6 GB in four processes.", FOUR_BIG_PROCESSES),
        rlm_step("Report.", "SUBMIT(answer='carried on')"),
    )
    run = fleet_run("Use memory", tmp_path, scripted_env(model_server, sandbox_memory_mb="512"))
    assert run.returncode == 0, run.stderr
    notice = "the sandbox: its processes and /tmp together reached the memory limit of 512 MB"
    assert any(notice in event["data"]["message"] for event in run.of_type("warning"))  # the person sees it
    assert notice in json.dumps(model_server.model.requests_for("root")[-1])  # and so does the model
    assert run.events[-1]["type"] == "turn.completed" and run.events[-1]["data"]["answer"] == "carried on"
    assert leftovers_of(run.pid) == []


def test_tmp_cannot_hold_more_than_the_memory_limit(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    needs("memory cgroup", "sized /tmp")
    model_server.script("root", rlm_step("Fill /tmp.", FILL_TMP_WITH_1GB), rlm_step("Report.", "SUBMIT(answer='x')"))
    run = fleet_run("Fill /tmp", tmp_path, scripted_env(model_server, sandbox_memory_mb="512"))
    assert run.returncode == 0, run.stderr
    # The kernel killed the sandbox at the limit; a fresh one carried on, and the model was told.
    assert [event["data"]["cause"] for event in run.of_type("sandbox.restarted")] == [
        "SIGKILL at the 512 MB memory limit"
    ]
    told = "the sandbox restarted after SIGKILL at the 512 MB memory limit; variables are lost"
    assert told in json.dumps(model_server.model.requests_for("root")[-1])
    assert run.events[-1]["type"] == "turn.completed"
    assert leftovers_of(run.pid) == []


def test_a_fork_bomb_is_contained(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    needs("process-count cgroup")
    model_server.script("root", rlm_step("Fork.", FORK_BOMB_COUNT), rlm_step("Report.", "SUBMIT(answer=str(tasks))"))
    run = fleet_run("Fork bomb", tmp_path, scripted_env(model_server, sandbox_max_processes="24"))
    assert run.returncode == 0, run.stderr
    assert run.events[-1]["type"] == "turn.completed"
    assert int(run.events[-1]["data"]["answer"]) <= 24 + 1  # plus bubblewrap's init, pid 1 of the sandbox
    assert leftovers_of(run.pid) == []


def test_cpu_time_is_bounded_for_all_processes_together(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    needs("CPU time")
    model_server.script("root", rlm_step("Spin.", FOUR_SPINNERS), rlm_step("Report.", "SUBMIT(answer='x')"))
    env = scripted_env(model_server, sandbox_cpu_seconds="3")
    started = time.monotonic()
    run = fleet_run("Spin", tmp_path, env)
    assert run.returncode == 0, run.stderr
    # The host stopped the whole sandbox at the limit; a fresh one carried on.
    assert [event["data"]["cause"] for event in run.of_type("sandbox.restarted")] == [
        "SIGKILL at the 3s CPU time limit"
    ]
    assert time.monotonic() - started < 60
    assert leftovers_of(run.pid) == []


def test_escape_system_calls_fail_with_eperm(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    needs("seccomp")
    model_server.script("root", rlm_step("Probe.", SYSCALL_PROBE + "\nSUBMIT(answer=json.dumps(found))"))
    run = fleet_run("Probe the kernel", tmp_path, scripted_env(model_server))
    assert run.returncode == 0, run.stderr
    found = json.loads(run.events[-1]["data"]["answer"])
    expected = [
        "unshare(CLONE_NEWUSER)",
        "clone(CLONE_NEWUSER)",
        "setns",
        "mount",
        "ptrace",
        "keyctl",
        "bpf",
        "perf_event_open",
        "io_uring_setup",
        "kexec_load",
        "init_module",
    ]
    assert sorted(found) == sorted(expected)
    assert found == dict.fromkeys(expected, 1), found  # errno 1: EPERM, a clean error for every one


def test_sockets_outside_the_network_namespace_fail_with_eperm(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """No vsock port in the host's (or hypervisor's) vsock space, no uevent socket hearing the host's
    device events (another session's loop device); the sockets Python and libc use still work."""
    needs("seccomp")
    model_server.script("root", rlm_step("Probe.", SOCKET_PROBE + "\nSUBMIT(answer=json.dumps(found))"))
    run = fleet_run("Probe the sockets", tmp_path, scripted_env(model_server))
    assert run.returncode == 0, run.stderr
    found = json.loads(run.events[-1]["data"]["answer"])
    assert found == {
        "vsock listen": errno.EPERM,
        "vsock to the hypervisor": errno.EPERM,
        "uevent netlink": errno.EPERM,
        "generic netlink": errno.EPERM,
        "route netlink": 0,
        "unix socketpair": 0,
        "interfaces": 0,
    }
    with socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM) as host:  # the port is still the host's
        host.bind((socket.VMADDR_CID_ANY, 47047))


def test_nothing_is_left_when_the_turn_is_cut_short(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    model_server.script(
        "root", rlm_step("Wait.", "import subprocess, time\nsubprocess.Popen(['sleep', '60'])\ntime.sleep(60)")
    )
    process = subprocess.Popen(
        [*FLEET, "run", "Wait", "--json", "--timeout", "3"],
        cwd=tmp_path,
        env=environment(tmp_path, scripted_env(model_server)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1, stderr
    assert leftovers_of(process.pid) == []


def test_what_a_killed_host_left_is_reaped_by_the_next_run(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    needs("memory cgroup", "sized /tmp")
    model_server.script(
        "root",
        rlm_step(
            "Wait.", "import subprocess, time\nsubprocess.Popen(['sleep', '60'])\nprint('waiting')\ntime.sleep(60)"
        ),
    )
    killed = subprocess.Popen(
        [*FLEET, "run", "Wait", "--json"],
        cwd=tmp_path,
        env=environment(tmp_path, scripted_env(model_server)),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert killed.stdout is not None
    for line in killed.stdout:
        if "waiting" in line:
            break
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    killed.stdout.close()
    left = leftovers_of(killed.pid)
    assert any(path.is_relative_to("/sys/fs/cgroup") for path in left) and any(path.name == "tmp" for path in left)

    model_server.script("root", rlm_step("Answer.", "SUBMIT(answer='fresh')"))
    run = fleet_run("Next", tmp_path, scripted_env(model_server))
    assert run.returncode == 0, run.stderr
    assert leftovers_of(killed.pid) == []
