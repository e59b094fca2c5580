"""A sandbox's first process is held at its gate until the host has placed it, without a fork of the host."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest

from fleet_rlm.sandbox.gate import GATE_EXIT, GATE_SCRIPT, SHELL, set_rlimits, start_gated

_host_forks: list[int] = []
os.register_at_fork(before=lambda: _host_forks.append(1))


def _run(script: str, place: object, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    process = start_gated(["/bin/sh", "-c", script], place, stdout=subprocess.PIPE, cwd=tmp_path)  # type: ignore[arg-type]
    out, _ = process.communicate(timeout=10)
    return subprocess.CompletedProcess(process.args, process.returncode, out.decode())


def test_the_command_runs_only_after_it_was_placed_with_its_limits(tmp_path: Path) -> None:
    placed: list[int] = []

    def place(pid: int) -> None:
        (tmp_path / "placed").write_text(str(pid))
        set_rlimits(pid, [(resource.RLIMIT_FSIZE, (4096, 4096)), (resource.RLIMIT_CORE, (0, 0))])
        placed.append(pid)

    done = _run("cat placed; echo; ulimit -f; ulimit -c; echo $$", place, tmp_path)

    assert done.returncode == 0
    pid_seen, file_blocks, core, own_pid = done.stdout.split()
    assert int(pid_seen) == placed[0] == int(own_pid)  # the same process, placed before it ran
    assert int(file_blocks) * 512 == 4096 and core == "0"


def test_the_host_process_is_not_forked(tmp_path: Path) -> None:
    before = len(_host_forks)
    done = _run("echo ran", lambda pid: None, tmp_path)
    assert done.stdout == "ran\n"
    assert len(_host_forks) == before  # vfork and exec: no copy of the host's memory


def test_a_failed_placement_runs_nothing_and_raises(tmp_path: Path) -> None:
    started: list[subprocess.Popen[bytes]] = []

    def spawn(start: object) -> tuple[subprocess.Popen[bytes], int]:
        process, gate = start()  # type: ignore[operator]
        started.append(process)
        return process, gate

    def refuse(pid: int) -> None:
        raise PermissionError(f"cannot move {pid} into the cgroup")

    with pytest.raises(PermissionError, match="cannot move"):
        start_gated(["/bin/sh", "-c", "touch escaped"], refuse, spawn, cwd=tmp_path)

    assert not (tmp_path / "escaped").exists()
    assert started[0].returncode is not None  # killed and reaped, not left running or a zombie


def test_a_limit_that_cannot_be_set_stops_the_launch(tmp_path: Path) -> None:
    impossible = int(Path("/proc/sys/fs/nr_open").read_text()) + 1  # above what even root may set
    with pytest.raises((ValueError, OSError)):
        start_gated(
            ["/bin/sh", "-c", "touch escaped"],
            lambda pid: set_rlimits(pid, [(resource.RLIMIT_NOFILE, (impossible, impossible))]),
            cwd=tmp_path,
        )
    assert not (tmp_path / "escaped").exists()


def test_a_closed_gate_exits_without_running_the_command(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(write_end)
    done = subprocess.run([SHELL, "-c", GATE_SCRIPT, "gate", "touch", "escaped"], stdin=read_end, cwd=tmp_path)
    os.close(read_end)
    assert done.returncode == GATE_EXIT
    assert not (tmp_path / "escaped").exists()


def test_the_command_gets_no_descriptor_but_its_own_and_reads_nothing_from_the_gate(tmp_path: Path) -> None:
    done = _run("ls /proc/self/fd; cat", lambda pid: None, tmp_path)  # cat: stdin is /dev/null, so it ends
    assert done.returncode == 0
    assert sorted(int(fd) for fd in done.stdout.split()) == [0, 1, 2, 3]  # 3: ls's own directory handle
