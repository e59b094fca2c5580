"""Whether a host process is still alive (to clean up after one that died)."""

from __future__ import annotations

import psutil


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (killed, not yet reaped: dead for our purposes)."""
    if pid <= 0:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # ZombieProcess included
        return False
    except psutil.AccessDenied:
        return True
