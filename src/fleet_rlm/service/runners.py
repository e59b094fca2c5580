"""Which server process runs a turn, and whether that process is still alive.

A runner id is ``host:pid:nonce``. At start-up a server closes the turns (and reaps the sandboxes)
of runners on its own host whose process is gone, or that carry its own pid with another nonce (a
restarted container reuses pids). Runners on other hosts are left to their own server.
"""

from __future__ import annotations

import os
import socket
import uuid

from fleet_rlm.processes import pid_alive


def new_runner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def is_dead(runner: str | None, me: str) -> bool:
    """Whether the process ``runner`` names is certainly gone, judged from the process ``me``."""
    if runner is None:
        return True
    if runner == me:
        return False
    parts = runner.rsplit(":", 2)
    my_host = me.rsplit(":", 2)[0]
    if len(parts) != 3 or not parts[1].isdigit():
        return True
    host, pid = parts[0], int(parts[1])
    if host != my_host:
        return False
    return pid == os.getpid() or not pid_alive(pid)
