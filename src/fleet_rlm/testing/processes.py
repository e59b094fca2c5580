"""Watching processes on this machine: sandboxes alive (to prove nothing leaks), peak memory."""

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


def peak_rss_bytes(pid: int) -> int:
    """The most resident memory process ``pid`` has had since it started (``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/{pid}/status has no VmHWM")
