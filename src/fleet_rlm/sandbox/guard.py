"""One sandbox's whole-sandbox limits, from launch to teardown.

A :class:`SandboxGuard` makes the cgroups and the sized /tmp before launch, puts its first process in
its cgroups before that runs, hands bubblewrap the seccomp program, has the CPU time of all the
sandbox's processes watched, explains what a limit did, kills every process at the end and removes
what it made. A host exiting with sandboxes still running tears them down too.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from fleet_rlm.sandbox import owners
from fleet_rlm.sandbox.base import SandboxLimits
from fleet_rlm.sandbox.cgroups import SandboxCgroups
from fleet_rlm.sandbox.scratch import SizedTmp

if TYPE_CHECKING:
    from fleet_rlm.sandbox.protections import MachineProtections

log = logging.getLogger(__name__)
MB = 1024 * 1024
CPU_WATCH_INTERVAL = 0.25


class SandboxGuard:
    """Applies the machine's protections to one sandbox, from launch to teardown."""

    def __init__(self, machine: MachineProtections, limits: SandboxLimits, overhead_tasks: int) -> None:
        self.machine = machine
        self.limits = limits
        self.overhead_tasks = overhead_tasks
        self.name = owners.new_name()
        self.cgroups = SandboxCgroups(machine.layout, self.name) if machine.layout else None
        self.tmp: SizedTmp | None = None
        self.seccomp_fd: int | None = None
        self.stopped_for: str | None = None  # a limit the host enforced by killing the sandbox
        self._seen_ooms = 0
        self._seen_refusals = 0
        self._torn_down = False
        self._lock = threading.Lock()

    def prepare(self) -> None:
        """Make the cgroups, mount /tmp and ready the seccomp program: before the launch."""
        try:
            if self.cgroups is not None:
                tasks = self.limits.max_processes + self.overhead_tasks
                self.cgroups.create(self.limits.memory_mb * MB, tasks, self.limits.cpu_weight)
            if self.machine.tmp_root is not None:
                self.tmp = SizedTmp(self.machine.tmp_root, self.name, self.limits.memory_mb)
                self.tmp.create()
            if self.machine.seccomp is not None:
                self.seccomp_fd = self.machine.seccomp.pipe()
        except BaseException:
            self.teardown()
            raise

    def bwrap_tmp_arguments(self) -> list[str]:
        """How bubblewrap makes the sandbox's /tmp."""
        if self.tmp is not None:
            return ["--bind", str(self.tmp.mount_point), "/tmp"]
        if self.machine.bwrap_sizes_tmp:
            return ["--perms", "01777", "--size", str(self.limits.memory_mb * MB), "--tmpfs", "/tmp"]
        return ["--perms", "01777", "--tmpfs", "/tmp"]

    def bwrap_seccomp_arguments(self) -> list[str]:
        return ["--seccomp", str(self.seccomp_fd)] if self.seccomp_fd is not None else []

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self.seccomp_fd,) if self.seccomp_fd is not None else ()

    def place(self, pid: int) -> None:
        """Move the sandbox's first process (held before it runs) into the sandbox's cgroups."""
        if self.cgroups is not None:
            self.cgroups.place(pid)

    def launched(self) -> None:
        """After the launch: drop the host's copies of the child's fds and start watching CPU time."""
        if self.seccomp_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.seccomp_fd)
            self.seccomp_fd = None
        if self.cgroups is not None:
            self.cgroups.close_fds()
        _watch.add(self)

    # -- while it runs ---------------------------------------------------------------------------

    def check_cpu(self) -> None:
        """Kill the sandbox when all its processes together used up its CPU time."""
        if self.cgroups is None or self.stopped_for is not None:
            return
        used = self.cgroups.cpu_seconds()
        if used is not None and used >= self.limits.cpu_seconds:
            self.stopped_for = (
                f"the sandbox used up its CPU time limit of {self.limits.cpu_seconds}s "
                "(all its processes together) and was stopped"
            )
            self.cgroups.kill_all()

    def notice(self) -> str | None:
        """What the kernel did to the sandbox since the last call (processes killed for memory, forks
        refused), for the person and the model; None when nothing happened."""
        if self.cgroups is None:
            return None
        notes = []
        ooms, refusals = self.cgroups.oom_kills(), self.cgroups.task_refusals()
        if ooms > self._seen_ooms:
            notes.append(
                f"the kernel killed {ooms - self._seen_ooms} process(es) of the sandbox: its processes and /tmp "
                f"together reached the memory limit of {self.limits.memory_mb} MB"
            )
        if refusals > self._seen_refusals:
            notes.append(
                f"{refusals - self._seen_refusals} process or thread start(s) were refused: the sandbox may run "
                f"at most {self.limits.max_processes} processes and threads"
            )
        self._seen_ooms, self._seen_refusals = ooms, refusals
        return "; ".join(notes) or None

    def death_reason(self) -> str | None:
        """Why the sandbox died, when a whole-sandbox limit explains it."""
        if self.stopped_for is not None:
            return self.stopped_for
        if self.cgroups is not None and self.cgroups.oom_kills() > 0:
            return (
                f"the sandbox ran out of memory: its processes and /tmp together reached the "
                f"{self.limits.memory_mb} MB limit"
            )
        return None

    def limit_hit(self) -> str | None:
        """The whole-sandbox limit that killed it, in a few words ("the 512 MB memory limit"): the
        host's CPU time watch, or the kernel killing a process at the memory limit since the last
        :meth:`notice`."""
        if self.stopped_for is not None:
            return f"the {self.limits.cpu_seconds}s CPU time limit"
        if self.cgroups is not None and self.cgroups.oom_kills() > self._seen_ooms:
            return f"the {self.limits.memory_mb} MB memory limit"
        return None

    # -- ending ----------------------------------------------------------------------------------

    def kill_all(self) -> None:
        """SIGKILL every process of the sandbox and wait for them (no-op without cgroups)."""
        if self.cgroups is not None and not self.cgroups.kill_all():
            log.warning("sandbox %s: processes still alive after the kill", self.name)

    def teardown(self) -> None:
        """Kill what is left, unmount /tmp, remove the cgroups. Safe to call more than once."""
        with self._lock:
            if self._torn_down:
                return
            self._torn_down = True
        _watch.discard(self)
        if self.seccomp_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.seccomp_fd)
            self.seccomp_fd = None
        self.kill_all()
        if self.tmp is not None:
            try:
                self.tmp.remove()
            except OSError as exc:
                log.warning("sandbox %s: /tmp not removed: %s", self.name, exc)
        if self.cgroups is not None:
            for left in self.cgroups.remove():
                log.warning("sandbox %s: cgroup not removed: %s", self.name, left)


class _CpuWatch:
    """One daemon thread that checks every live sandbox's CPU time a few times a second."""

    def __init__(self) -> None:
        self._guards: set[SandboxGuard] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, guard: SandboxGuard) -> None:
        with self._lock:
            self._guards.add(guard)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fleet-sandbox-cpu", daemon=True)
                self._thread.start()

    def discard(self, guard: SandboxGuard) -> None:
        with self._lock:
            self._guards.discard(guard)

    def live(self) -> list[SandboxGuard]:
        with self._lock:
            return list(self._guards)

    def _run(self) -> None:
        while True:
            time.sleep(CPU_WATCH_INTERVAL)
            for guard in self.live():
                try:
                    guard.check_cpu()
                except Exception:
                    log.exception("sandbox %s: CPU time check failed", guard.name)


_watch = _CpuWatch()


@atexit.register
def _tear_down_live_sandboxes() -> None:
    """A host exiting with sandboxes still running leaves no cgroup or mount behind."""
    for guard in _watch.live():
        with contextlib.suppress(Exception):
            guard.teardown()
