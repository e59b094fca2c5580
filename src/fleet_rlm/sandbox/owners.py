"""Names of the host resources one sandbox owns (its cgroups, its state directory).

A name carries the host process that made it — ``fleet-<pid namespace>-<pid>-<start time>-<n>`` —
so that resources left behind by a dead host process are recognised (a reused pid has another start
time) and reaped at the next start-up, while those of live Fleet processes are left alone.
"""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

PREFIX = "fleet-"
_counter = itertools.count(1)
_counter_lock = threading.Lock()


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def new_name() -> str:
    """A fresh name for one sandbox's resources, unique on this machine."""
    with _counter_lock:
        number = next(_counter)
    pid = os.getpid()
    return f"{PREFIX}{_pid_namespace()}-{pid}-{_start_time(pid) or 0}-{number}"


def owner_is_dead(name: str) -> bool:
    """Whether ``name`` was made by a host process of this pid namespace that no longer runs.

    Names from another pid namespace (another container sharing the cgroup hierarchy) are never
    judged dead: their owner cannot be seen from here.
    """
    parts = name.split("-")
    if len(parts) != 5 or parts[0] + "-" != PREFIX or not all(part.isdigit() for part in parts[1:]):
        return False
    namespace, pid, started = int(parts[1]), int(parts[2]), int(parts[3])
    if namespace != _pid_namespace():
        return False
    return _start_time(pid) != started
