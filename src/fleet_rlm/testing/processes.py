"""Counting the sandbox processes alive on this machine, to prove nothing leaks."""

from __future__ import annotations

from pathlib import Path

from fleet_rlm.sandbox.isolation import WORKER_MOUNT, WORKER_SOURCE

_MARKERS = (WORKER_MOUNT.encode(), str(WORKER_SOURCE).encode())


def live_sandbox_pids(under: Path | None = None) -> set[int]:
    """Pids of processes running a Fleet sandbox worker, or bubblewrap around one.

    With ``under``, only sandboxes whose workspace lies below that directory (their command line names
    it), so that a test counts its own sandboxes and not those of other runs on the machine.
    """
    scope = str(under).encode() if under is not None else b""
    pids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if any(marker in cmdline for marker in _MARKERS) and scope in cmdline:
            pids.add(int(entry.name))
    return pids
