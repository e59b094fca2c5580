"""Counting the sandbox processes alive on this machine, to prove nothing leaks."""

from __future__ import annotations

from pathlib import Path

from fleet_rlm.sandbox.isolation import WORKER_MOUNT, WORKER_SOURCE

_MARKERS = (WORKER_MOUNT.encode(), str(WORKER_SOURCE).encode())


def live_sandbox_pids() -> set[int]:
    """Pids of processes running a Fleet sandbox worker, or bubblewrap around one."""
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if any(marker in cmdline for marker in _MARKERS):
            pids.add(int(entry.name))
    return pids
