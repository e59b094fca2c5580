"""Watching processes on this machine: sandboxes alive (to prove nothing leaks), peak memory."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil

from fleet_rlm.sandbox.isolation import WORKER_MOUNT, WORKER_SOURCE

_MARKERS = (WORKER_MOUNT, str(WORKER_SOURCE))


def live_sandbox_pids(under: Path | None = None) -> set[int]:
    """Pids of processes running a Fleet sandbox worker, or bubblewrap around one.

    With ``under``, only sandboxes whose workspace lies below that directory (their command line names
    it), so that a test counts its own sandboxes and not those of other runs on the machine.
    """
    scope = str(under) if under is not None else ""
    pids: set[int] = set()
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):  # gone, a zombie, or not ours to read
            cmdline = "\0".join(process.cmdline())
            if any(marker in cmdline for marker in _MARKERS) and scope in cmdline:
                pids.add(process.pid)
    return pids


def peak_rss_bytes(pid: int) -> int:
    """The most resident memory process ``pid`` has had since it started (``VmHWM``; psutil has no
    peak on Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM")
