"""Starting a sandbox's first process without forking Fleet's process.

A ``preexec_fn`` (to enter the sandbox's cgroups and set its resource limits between fork and exec)
makes Python fork the whole host process: for a server-sized process that copies its page tables,
~10 ms of CPU and ~20 ms with the interpreter lock held, on the one thread that starts every
sandbox. Instead the child is started with ``vfork`` as a shell held at a gate, reading one line
from a pipe; while it waits, the host moves its pid into the sandbox's cgroups and sets its limits
(``prlimit`` on the pid), then opens the gate and the shell ``exec``\\ s the command. Nothing the
sandbox runs starts before both are in place: if placing it fails, the gate is never opened, the
shell is killed and the error raised.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

SHELL = "/bin/sh"
# The gate: one line read from stdin (the gate pipe), then the command, stdin from /dev/null. At end
# of file without a line (the host closed the gate unopened) the shell exits without running it.
GATE_SCRIPT = 'read -r _ || exit 125; exec "$@" </dev/null'
GATE_EXIT = 125  # not one of the shell's own (126: not executable, 127: not found)

Rlimit = tuple[int, tuple[int, int]]


def start_gated(
    argv: Sequence[str],
    place: Callable[[int], None],
    spawn: Callable[[Callable[[], tuple[subprocess.Popen[bytes], int]]], tuple[subprocess.Popen[bytes], int]] = (
        lambda start: start()
    ),
    **popen: Any,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` held at the gate, ``place(pid)`` it, then let it run; ``spawn`` runs the start
    (on the thread the process must belong to). ``popen`` are :class:`subprocess.Popen`'s other
    arguments (not ``stdin``: the gate is the child's stdin until it runs, /dev/null after)."""

    def start() -> tuple[subprocess.Popen[bytes], int]:
        # The pipe is made and its reading end closed where the process starts: a caller interrupted
        # while waiting for ``spawn`` never closes a descriptor Popen is still using.
        gate_r, gate_w = os.pipe()
        try:
            process = subprocess.Popen([SHELL, "-c", GATE_SCRIPT, "fleet-gate", *argv], stdin=gate_r, **popen)
        except BaseException:
            os.close(gate_w)
            raise
        finally:
            os.close(gate_r)
        return process, gate_w

    process, gate_w = spawn(start)
    try:
        place(process.pid)
        os.write(gate_w, b"\n")
    except BaseException:
        with contextlib.suppress(OSError):
            process.kill()
        process.wait()
        raise
    finally:
        os.close(gate_w)
    return process


def set_rlimits(pid: int, settings: Sequence[Rlimit]) -> None:
    """Set each (resource, (soft, hard)) limit of process ``pid``. Off Linux (the unisolated launcher
    only) a limit the platform does not support is skipped; on Linux every one must hold."""
    strict = sys.platform.startswith("linux")
    prlimit = getattr(resource, "prlimit", None)
    if prlimit is None:
        if strict:
            raise OSError("resource.prlimit is not available")
        return
    for limit, value in settings:
        try:
            prlimit(pid, limit, value)
        except (ValueError, OSError):
            if strict:
                raise
