"""Which server process runs a turn, and whether that process is still alive.

A runner id is ``host:pid:nonce``, where ``host`` is the host name and the pid namespace the pid is
counted in (``name/ns``): containers may share a host name (host networking, a fixed ``hostname``)
while each counts its own pids from 1. At start-up a server closes the turns (and reaps the
sandboxes) of runners on its own host whose process is gone, or that carry its own pid with another
nonce (a process restarted in the same namespace). Runners on other hosts, or in other pid
namespaces, are left to their own server, or to their leases' expiry.
"""

from __future__ import annotations

import os
import socket
import uuid

from fleet_rlm.processes import pid_alive


def this_host() -> str:
    """The ``host`` of this process's runner ids: its host name and pid namespace."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:  # no /proc: the host name alone
        return socket.gethostname()
    return f"{socket.gethostname()}/{namespace}"


def new_runner_id() -> str:
    return f"{this_host()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


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
    if host != my_host and host != my_host.split("/")[0]:  # an id from before namespaces were named: this host
        return False
    return pid == os.getpid() or not pid_alive(pid)


def kernel_free(holder: str | None, runner: str) -> bool:
    """Whether ``runner`` may run a session whose kernel ``holder`` keeps (None: nobody): it keeps it
    itself, or nobody alive does."""
    return holder is None or holder == runner or is_dead(holder, runner)
