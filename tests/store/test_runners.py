"""Whose turns a starting server may close: ``is_dead`` judges another server process from its runner id."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from fleet_rlm.store.runners import is_dead, new_runner_id, this_host

HOST = this_host()


@pytest.fixture
def live_process() -> Iterator[int]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def ended_process() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_runner_id_names_this_host_its_pid_namespace_and_this_process() -> None:
    host, pid, nonce = new_runner_id().rsplit(":", 2)
    assert (host, int(pid)) == (f"{socket.gethostname()}/{os.stat('/proc/self/ns/pid').st_ino}", os.getpid())
    assert nonce and new_runner_id() != new_runner_id()


def test_this_process_is_alive_to_itself() -> None:
    me = new_runner_id()
    assert not is_dead(me, me)


def test_a_turn_without_a_runner_is_dead() -> None:
    assert is_dead(None, new_runner_id())


@pytest.mark.parametrize("runner", ["", "garbage", f"{HOST}:not-a-pid:abc", "a:b"])
def test_an_unreadable_runner_id_is_dead(runner: str) -> None:
    assert is_dead(runner, new_runner_id())


def test_a_live_process_on_this_host_is_alive(live_process: int) -> None:
    assert not is_dead(f"{HOST}:{live_process}:0123abcd", new_runner_id())


def test_an_ended_process_on_this_host_is_dead(ended_process: int) -> None:
    assert is_dead(f"{HOST}:{ended_process}:0123abcd", new_runner_id())


def test_an_exited_but_unreaped_process_is_dead() -> None:
    """A zombie still has its pid, but nothing runs there any more."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        runner = f"{HOST}:{process.pid}:0123abcd"
        deadline = time.monotonic() + 10
        while not is_dead(runner, new_runner_id()) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None  # not reaped
        assert is_dead(runner, new_runner_id())
    finally:
        process.wait()


def test_this_pid_with_another_nonce_is_a_previous_server_and_dead() -> None:
    """A restarted container reuses pids: the same pid under another nonce is an earlier process."""
    assert is_dead(f"{HOST}:{os.getpid()}:0123abcd", new_runner_id())


def test_a_runner_on_another_host_is_left_to_that_host(ended_process: int) -> None:
    assert not is_dead(f"another-{HOST}:{ended_process}:0123abcd", new_runner_id())


def test_a_process_in_another_pid_namespace_of_this_host_name_is_left_to_its_own(ended_process: int) -> None:
    """Containers sharing a host name (host networking, a fixed ``hostname``) each count pids from 1:
    a pid there says nothing about a pid here, not even this process's own."""
    other_namespace = f"{socket.gethostname()}/1"
    assert not is_dead(f"{other_namespace}:{ended_process}:0123abcd", new_runner_id())
    assert not is_dead(f"{other_namespace}:{os.getpid()}:0123abcd", new_runner_id())
