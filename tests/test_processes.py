"""Process inspection on the host (psutil): liveness for clean-up, task counts for RLIMIT_NPROC."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from fleet_rlm.processes import pid_alive
from fleet_rlm.sandbox.isolation import user_task_count, walk_processes_of


def test_a_running_process_is_alive_and_an_exited_one_is_not_even_before_it_is_reaped() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert pid_alive(child.pid)
        assert child.pid in set(walk_processes_of(os.getuid()))
    finally:
        assert child.stdin is not None
        child.stdin.close()
    deadline = time.monotonic() + 10
    while pid_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not pid_alive(child.pid), "an exited child is dead while still a zombie"
    assert child.pid in set(walk_processes_of(os.getuid())), "its zombie still counts as left behind"
    child.wait()
    assert not pid_alive(child.pid)
    assert not pid_alive(0) and not pid_alive(-1)


def test_the_task_count_includes_every_thread_of_this_process() -> None:
    release = threading.Event()
    threads = [threading.Thread(target=release.wait) for _ in range(5)]
    for thread in threads:
        thread.start()
    try:
        own_tasks = len(os.listdir("/proc/self/task"))
        assert own_tasks > len(threads)
        assert user_task_count() >= own_tasks
    finally:
        release.set()
        for thread in threads:
            thread.join()
