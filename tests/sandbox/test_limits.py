"""Whole-sandbox limits: memory and process count over all processes, a sized /tmp, CPU time over all
processes, the seccomp filter, and teardown that leaves nothing behind. Real sandboxes, as root."""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dspy.primitives.code_interpreter import CodeInterpreterError

from fleet_rlm.api.server import server_settings
from fleet_rlm.config import Settings
from fleet_rlm.sandbox import cgroups
from fleet_rlm.sandbox.base import SandboxLimits, SandboxSpec, SandboxUnavailable
from fleet_rlm.sandbox.gate import start_gated
from fleet_rlm.sandbox.isolation import rlimits
from fleet_rlm.sandbox.local import LocalSandboxBackend
from fleet_rlm.sandbox.local_sandbox import LocalSandbox
from fleet_rlm.sandbox.owners import new_name
from fleet_rlm.sandbox.protections import ProtectionOptions, leftovers_of, reap_stale
from fleet_rlm.sandbox.registry import configured_backend

from .helpers import RecordingObserver
from .limits_probes import FILL_TMP_WITH_1GB, FORK_BOMB_COUNT, FOUR_BIG_PROCESSES, FOUR_SPINNERS, SYSCALL_PROBE

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="whole-sandbox limits are enforced when the host is root")

LAYOUTS = {
    "preferred": ProtectionOptions(),  # cgroup v2 where it can serve, v1 for the rest
    "v1-only": ProtectionOptions(cgroup_v2=False),  # the cgroup v1 paths: cpuacct, freezer kill
}
NO_PROTECTIONS = ProtectionOptions(cgroups=False, sized_tmp=False, seccomp=False)


def needs(backend: LocalSandboxBackend, *names: str) -> None:
    """Skip, saying why, when this machine cannot enforce a protection the test is about."""
    rows = {row.name: row for row in backend.protections_report()}
    for name in names:
        if not rows[name].enforced:
            pytest.skip(f"{name} is not enforced on this machine: {rows[name].reason}")


@pytest.fixture(params=list(LAYOUTS))
def layout_backend(request: pytest.FixtureRequest) -> LocalSandboxBackend:
    return LocalSandboxBackend(interrupt_grace=0.5, protections=LAYOUTS[request.param])


@pytest.fixture
def made(workspace: Path) -> Iterator[list[LocalSandbox]]:
    sandboxes: list[LocalSandbox] = []
    yield sandboxes
    for sandbox in sandboxes:
        sandbox.shutdown()


def start(
    backend: LocalSandboxBackend,
    workspace: Path,
    made: list[LocalSandbox],
    observer: RecordingObserver | None = None,
    **limits: Any,
) -> LocalSandbox:
    spec_limits = dataclasses.replace(SandboxLimits(execution_timeout=30.0), **limits)
    sandbox = backend.create(SandboxSpec(workspace, limits=spec_limits, observer=observer or RecordingObserver()))
    made.append(sandbox)
    sandbox.start()
    return sandbox


def test_this_machine_enforces_every_protection(backend: LocalSandboxBackend) -> None:
    rows = backend.protections_report(SandboxLimits(memory_mb=512))
    assert [row.name for row in rows] == [
        "memory cgroup",
        "process-count cgroup",
        "sized /tmp",
        "CPU time",
        "CPU weight",
        "seccomp",
        "disk quota",
    ]
    needs(backend, "memory cgroup", "process-count cgroup", "sized /tmp", "CPU time", "seccomp", "disk quota")
    needs(backend, "CPU weight")
    assert "512 MB for all processes and /tmp together" in rows[0].reason
    assert [row.name for row in rows if not row.required] == ["CPU weight"]


def test_memory_is_bounded_across_all_processes(
    layout_backend: LocalSandboxBackend, workspace: Path, made: list[LocalSandbox]
) -> None:
    needs(layout_backend, "memory cgroup")
    observer = RecordingObserver()
    sandbox = start(layout_backend, workspace, made, observer, memory_mb=512)
    output = str(sandbox.execute(FOUR_BIG_PROCESSES))
    codes = json.loads(output.split("exit codes ", 1)[1].splitlines()[0])
    assert codes.count(0) < 2, output  # 4 x 400 MB never fit in 512 MB, whatever each process's own limit
    assert -9 in codes
    notice = "reached the memory limit of 512 MB"
    assert notice in output  # the model sees it
    assert any(notice in warning for warning in observer.warnings)  # so does the person
    assert sandbox.execute("print('worker survived')") == "worker survived"


def test_tmp_is_sized_and_counts_against_the_memory_limit(
    backend: LocalSandboxBackend, workspace: Path, made: list[LocalSandbox]
) -> None:
    needs(backend, "sized /tmp", "memory cgroup")
    sandbox = start(backend, workspace, made, memory_mb=512)
    size = sandbox.execute("import os\ns = os.statvfs('/tmp')\nprint(s.f_blocks * s.f_frsize // 2**20, s.f_files)")
    assert size == f"512 {512 * 64}"
    with pytest.raises(
        CodeInterpreterError, match=r"ran out of memory: its processes and /tmp together reached the 512 MB"
    ):
        sandbox.execute(FILL_TMP_WITH_1GB)


def test_cpu_time_is_bounded_across_all_processes(
    layout_backend: LocalSandboxBackend, workspace: Path, made: list[LocalSandbox]
) -> None:
    needs(layout_backend, "CPU time")
    sandbox = start(layout_backend, workspace, made, cpu_seconds=3)
    started = time.monotonic()
    with pytest.raises(CodeInterpreterError, match=r"CPU time limit of 3s \(all its processes together\)"):
        sandbox.execute(FOUR_SPINNERS)  # each process alone stays well under its own 3 s
    assert time.monotonic() - started < 10


SPAWN_SLEEPERS = """
import subprocess, sys
sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(3)]
print(len(sleepers))
"""

RAISE_OWN_PRIORITY = r"""
import ctypes, os
def attempt(call):
    try:
        call()
        return "done"
    except OSError as exc:
        return type(exc).__name__
libc = ctypes.CDLL(None, use_errno=True)
def fifo():
    param = ctypes.c_int(10)
    if libc.sched_setscheduler(0, 1, ctypes.byref(param)) != 0:  # SCHED_FIFO
        raise OSError(ctypes.get_errno(), "sched_setscheduler")
def leave_cgroup():
    with open("/sys/fs/cgroup/cpu/cgroup.procs", "w") as procs:
        procs.write(str(os.getpid()))
print({
    "nice -10": attempt(lambda: os.nice(-10)),
    "setpriority -10": attempt(lambda: os.setpriority(os.PRIO_PROCESS, 0, -10)),
    "SCHED_FIFO": attempt(fifo),
    "leave its cgroup": attempt(leave_cgroup),
})
"""


def sandbox_weight_cgroup(backend: LocalSandboxBackend) -> Path:
    """The one cpu cgroup of a sandbox this process has running."""
    layout = backend.machine_protections().layout
    assert layout is not None and layout.weight is not None
    found = [path for path in leftovers_of(os.getpid()) if path.parent == layout.weight.parent]
    assert len(found) == 1, found
    return found[0]


def weight_of(group: Path) -> int:
    if (group / "cpu.weight").exists():
        return int((group / "cpu.weight").read_text())
    return int((group / "cpu.shares").read_text())


def test_a_sandbox_weighs_as_one_at_its_cpu_weight(
    layout_backend: LocalSandboxBackend, workspace: Path, made: list[LocalSandbox]
) -> None:
    """All the sandbox's processes share one CPU weight below a host process's, so busy sandboxes leave
    the host (its event loop, its engines) served first instead of each weighing as much as the host."""
    needs(layout_backend, "CPU weight")
    sandbox = start(layout_backend, workspace, made, cpu_weight=25)
    group = sandbox_weight_cgroup(layout_backend)
    assert weight_of(group) in (25, cgroups.v1_shares(25))  # 256 shares on v1, against 1024 for a host process
    assert sandbox.execute(SPAWN_SLEEPERS) == "3"
    assert len((group / "cgroup.procs").read_text().split()) >= 5  # bubblewrap, the worker and its three sleepers
    row = {row.name: row for row in layout_backend.protections_report(SandboxLimits(cpu_weight=25))}["CPU weight"]
    assert row.enforced and "25 for all processes together, against 100 for a host process" in row.reason


def test_sandbox_code_cannot_raise_its_own_cpu_share(
    backend: LocalSandboxBackend, workspace: Path, made: list[LocalSandbox]
) -> None:
    needs(backend, "CPU weight")
    sandbox = start(backend, workspace, made)
    group = sandbox_weight_cgroup(backend)
    members = set((group / "cgroup.procs").read_text().split())
    attempts = sandbox.execute(RAISE_OWN_PRIORITY)
    assert "done" not in str(attempts), attempts
    assert weight_of(group) in (10, cgroups.v1_shares(10))
    assert members <= set((group / "cgroup.procs").read_text().split())


READ_PRIORITY_LIMITS = """
import resource
print([resource.getrlimit(resource.RLIMIT_RTPRIO), resource.getrlimit(resource.RLIMIT_NICE)])
"""


def test_sandbox_code_cannot_take_the_real_time_priority_its_host_may(
    backend: LocalSandboxBackend, workspace: Path, made: list[LocalSandbox]
) -> None:
    """A host allowed real-time priorities and nice values below 0 (RLIMIT_RTPRIO and RLIMIT_NICE, from
    limits.conf or ``docker --ulimit``) does not pass them on: a real-time process would ignore the
    sandbox's CPU weight and take a core from the host."""
    assert (resource.RLIMIT_RTPRIO, (0, 0)) in rlimits(SandboxLimits(), 64)
    assert (resource.RLIMIT_NICE, (0, 0)) in rlimits(SandboxLimits(), 64)
    raised = {resource.RLIMIT_RTPRIO: (50, 50), resource.RLIMIT_NICE: (30, 30)}
    saved = {which: resource.getrlimit(which) for which in raised}
    try:
        for which, value in raised.items():
            resource.setrlimit(which, value)
    except ValueError as exc:  # no CAP_SYS_RESOURCE in this container
        for which, value in saved.items():
            resource.setrlimit(which, value)
        pytest.skip(f"this host cannot raise its own real-time limits to try: {exc}")
    try:
        sandbox = start(backend, workspace, made)
    finally:
        for which, value in saved.items():
            resource.setrlimit(which, value)
    assert sandbox.execute(READ_PRIORITY_LIMITS) == "[(0, 0), (0, 0)]"
    attempts = sandbox.execute(RAISE_OWN_PRIORITY)
    assert "done" not in str(attempts), attempts


def test_process_count_cgroup_bounds_processes_of_any_user(backend: LocalSandboxBackend) -> None:
    """The pids cgroup binds even root, which RLIMIT_NPROC does not: the bound is the cgroup's own."""
    needs(backend, "process-count cgroup")
    layout = backend.machine_protections().layout
    assert layout is not None
    group = cgroups.SandboxCgroups(layout, new_name())
    group.create(256 * 2**20, 10, 100)
    try:
        script = "import os, time\nn = 0\nfor _ in range(30):\n    try:\n        if os.fork() == 0:\n            time.sleep(5)\n            os._exit(0)\n        n += 1\n    except OSError:\n        pass\nprint(n)"
        process = start_gated([sys.executable, "-c", script], group.place, stdout=subprocess.PIPE, text=True)
        out, _ = process.communicate(timeout=30)
        assert int(out) == 9  # ten tasks in all: the script and nine children
        assert group.task_refusals() > 0
    finally:
        assert group.kill_all()
        assert group.remove() == []


def test_fork_bomb_is_contained_across_the_whole_sandbox(
    backend: LocalSandboxBackend, workspace: Path, made: list[LocalSandbox]
) -> None:
    needs(backend, "process-count cgroup")
    sandbox = start(backend, workspace, made, max_processes=24)
    output = str(sandbox.execute(FORK_BOMB_COUNT))
    tasks = int(output.split("tasks ", 1)[1].split()[0])
    assert 10 <= tasks <= 24 + 1, output  # plus bubblewrap's init, pid 1 of the sandbox
    assert sandbox.execute("print('worker survived')") == "worker survived"
    pid = os.getpid()
    sandbox.shutdown()
    assert leftovers_of(pid) == []


def test_denied_system_calls_fail_with_eperm(
    backend: LocalSandboxBackend, workspace: Path, made: list[LocalSandbox]
) -> None:
    needs(backend, "seccomp")
    sandbox = start(backend, workspace, made)
    found = json.loads(str(sandbox.execute(SYSCALL_PROBE)))
    assert found == dict.fromkeys(found, 1), found  # 1 = EPERM, for every call
    assert sandbox.execute("print(open('/proc/self/status').read().split('Seccomp:')[1].split()[0])") == "2"


def test_without_the_filter_the_same_calls_get_through(workspace: Path, made: list[LocalSandbox]) -> None:
    """The control for the test above: it is the filter, not missing privileges, that says EPERM."""
    sandbox = start(LocalSandboxBackend(protections=NO_PROTECTIONS), workspace, made)
    found = json.loads(str(sandbox.execute(SYSCALL_PROBE)))
    assert found["ptrace"] == 0 and found["keyctl"] != 1 and found["mount"] != 1 and found["setns"] != 1
    if Path("/proc/sys/user/max_user_namespaces").read_text().strip() != "0":
        assert found["unshare(CLONE_NEWUSER)"] == 0 and found["clone(CLONE_NEWUSER)"] == 0


def test_ordinary_code_runs_under_every_limit(
    backend: LocalSandboxBackend, workspace: Path, made: list[LocalSandbox]
) -> None:
    sandbox = start(backend, workspace, made)
    code = (
        "import asyncio, concurrent.futures, mmap, multiprocessing, os, sqlite3, subprocess, sys, threading\n"
        "results = []\n"
        "t = threading.Thread(target=results.append, args=('thread',)); t.start(); t.join()\n"
        "with concurrent.futures.ThreadPoolExecutor(8) as pool:\n"
        "    results.append(sum(pool.map(lambda n: n * n, range(100))))\n"
        "child = multiprocessing.get_context('fork').Process(target=sys.exit, args=(3,))\n"
        "child.start(); child.join(); results.append(child.exitcode)\n"
        "results.append(subprocess.run(['sh', '-c', 'echo shell'], capture_output=True, text=True).stdout.strip())\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(7)\n"
        "results.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
        "m = mmap.mmap(-1, 64 * 2**20); m[:5] = b'mmap!'; results.append(m[:5].decode()); m.close()\n"
        "db = sqlite3.connect('/tmp/x.db'); db.execute('create table t (x)'); db.execute('insert into t values (1)')\n"
        "results.append(db.execute('select count(*) from t').fetchone()[0])\n"
        "results.append(asyncio.run(asyncio.sleep(0, 'async')))\n"
        "print(results)"
    )
    assert sandbox.execute(code) == "['thread', 328350, 3, 'shell', 7, 'mmap!', 1, 'async']"


def test_nothing_is_left_after_shutdown_or_interrupt(
    layout_backend: LocalSandboxBackend, workspace: Path, made: list[LocalSandbox]
) -> None:
    pid = os.getpid()
    for end in ("shutdown", "interrupt"):
        sandbox = start(layout_backend, workspace, made)
        sandbox.execute(
            "import subprocess\nfor _ in range(3):\n    subprocess.Popen(['sleep', '60'], start_new_session=True)"
        )
        assert leftovers_of(pid) != []
        if end == "interrupt":
            errors: list[BaseException] = []
            runner = threading.Thread(target=_execute_into, args=(sandbox, "import time; time.sleep(30)", errors))
            runner.start()
            time.sleep(0.3)
            sandbox.interrupt()
            runner.join(timeout=5)
            assert isinstance(errors[0], CodeInterpreterError) and "cancelled" in str(errors[0])
        else:
            sandbox.shutdown()
        assert leftovers_of(pid) == [], end


def _execute_into(sandbox: LocalSandbox, code: str, errors: list[BaseException]) -> None:
    try:
        sandbox.execute(code)
    except BaseException as exc:
        errors.append(exc)


def test_what_a_dead_host_left_is_reaped(backend: LocalSandboxBackend, workspace: Path) -> None:
    """A host killed outright leaves its sandbox cgroups and /tmp mount; a later start-up removes them."""
    needs(backend, "memory cgroup", "sized /tmp")
    host = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from fleet_rlm.sandbox.base import SandboxSpec\n"
        "from fleet_rlm.sandbox.local import LocalSandboxBackend\n"
        "sandbox = LocalSandboxBackend().create(SandboxSpec(Path(sys.argv[1])))\n"
        'sandbox.execute(\'import subprocess; subprocess.Popen(["sleep", "60"])\')\n'
        "print('started', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", host, str(workspace)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = process.communicate(timeout=60)
    assert "started" in out, err
    left = leftovers_of(process.pid)
    assert any(path.is_relative_to("/sys/fs/cgroup") for path in left) and any(path.name == "tmp" for path in left)
    machine = backend.machine_protections()
    reap_stale(machine.layout, machine.tmp_root)
    assert leftovers_of(process.pid) == []


def test_require_limits_refuses_a_sandbox_that_cannot_be_bounded(workspace: Path, made: list[LocalSandbox]) -> None:
    weak = LocalSandboxBackend(protections=ProtectionOptions(seccomp=False, sized_tmp=False), require_limits=True)
    with pytest.raises(SandboxUnavailable) as refused:
        weak.create(SandboxSpec(workspace))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("refusing to start a sandbox that cannot be bounded")
    assert "sized /tmp" in message and "seccomp" in message and "memory cgroup" not in message
    check = weak.check()
    assert not check.ok and "missing sized /tmp" in check.message
    strong = LocalSandboxBackend(require_limits=True)
    needs(strong, "memory cgroup", "process-count cgroup", "sized /tmp", "CPU time", "seccomp")
    assert start(strong, workspace, made).execute("print('bounded')") == "bounded"


def test_a_server_requires_limits_unless_told_otherwise_and_fleet_run_does_not(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    assert settings.sandbox.require_limits is None
    run_backend = configured_backend(settings)
    served_backend = configured_backend(server_settings(settings))
    told_off = configured_backend(server_settings(settings.with_values({"sandbox_require_limits": False})))
    assert isinstance(run_backend, LocalSandboxBackend) and run_backend.require_limits is False
    assert isinstance(served_backend, LocalSandboxBackend) and served_backend.require_limits is True
    assert isinstance(told_off, LocalSandboxBackend) and told_off.require_limits is False


def test_where_the_host_cannot_mount_bubblewrap_caps_tmp_itself(
    workspace: Path, tmp_path: Path, made: list[LocalSandbox]
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    backend = LocalSandboxBackend(protections=ProtectionOptions(state_root=blocker / "sandboxes"))
    row = {row.name: row for row in backend.protections_report(SandboxLimits(memory_mb=300))}["sized /tmp"]
    if not row.enforced:
        pytest.skip(f"this bubblewrap cannot size its tmpfs: {row.reason}")
    assert "bubblewrap mounts (host cannot:" in row.reason
    sandbox = start(backend, workspace, made, memory_mb=300)
    assert sandbox.execute("import os\ns = os.statvfs('/tmp')\nprint(s.f_blocks * s.f_frsize // 2**20)") == "300"
