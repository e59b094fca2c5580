"""Whole-sandbox limits: what this machine can enforce, and the guard each sandbox gets.

:class:`MachineProtections` is detected once per process and option set (it also reaps the cgroups
and /tmp mounts that dead host processes left); :func:`protections_report` turns it into one row per
protection for ``fleet doctor`` and ``sandbox_require_limits``. A :class:`SandboxGuard` applies them
to one sandbox: it makes the cgroups and the sized /tmp before launch, gives the child its cgroups
between fork and exec, watches CPU time, kills every process at the end and removes what it made.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from fleet_rlm.sandbox import cgroups, owners, scratch
from fleet_rlm.sandbox.base import SandboxLimits
from fleet_rlm.sandbox.cgroups import CgroupLayout, SandboxCgroups
from fleet_rlm.sandbox.scratch import SizedTmp
from fleet_rlm.sandbox.seccomp import SeccompFilter, SeccompUnavailable, sandbox_filter
from fleet_rlm.sandbox.volume import quota_support

log = logging.getLogger(__name__)
MB = 1024 * 1024
CPU_WATCH_INTERVAL = 0.25


@dataclass(frozen=True)
class ProtectionOptions:
    """Which protections a backend applies (all by default); switching one off is for comparisons."""

    cgroups: bool = True
    cgroup_v2: bool = True  # use a writable cgroup2 where there is one (else only v1)
    sized_tmp: bool = True
    seccomp: bool = True
    state_root: Path = scratch.DEFAULT_STATE_ROOT


@dataclass(frozen=True)
class Protection:
    """One row of the protections report."""

    name: str
    enforced: bool
    reason: str


@dataclass(frozen=True)
class MachineProtections:
    """What this machine can enforce for sandboxes started by one launcher."""

    options: ProtectionOptions
    isolated: bool
    layout: CgroupLayout | None
    cgroups_note: str
    tmp_root: Path | None  # where the host mounts sized /tmp filesystems
    tmp_note: str
    bwrap_sizes_tmp: bool  # fallback: bubblewrap's own --size
    seccomp: SeccompFilter | None
    seccomp_note: str

    @classmethod
    def detect(cls, options: ProtectionOptions, *, isolated: bool, bwrap: str | None) -> MachineProtections:
        return _detect(options, isolated, bwrap)

    def guard(self, limits: SandboxLimits, overhead_tasks: int) -> SandboxGuard:
        return SandboxGuard(self, limits, overhead_tasks)


@functools.cache
def _detect(options: ProtectionOptions, isolated: bool, bwrap: str | None) -> MachineProtections:
    layout: CgroupLayout | None = None
    cgroups_note = "turned off for this backend"
    if options.cgroups:
        layout = cgroups.detect_layout(use_v2=options.cgroup_v2)
        cgroups_note = ""
    tmp_root: Path | None = None
    tmp_note = "no bubblewrap: /tmp is the host's" if not isolated else "turned off for this backend"
    if isolated and options.sized_tmp:
        why = scratch.probe_state_root(options.state_root)
        if why is None:
            tmp_root, tmp_note = options.state_root, ""
        else:
            tmp_note = why
    sizes = isolated and options.sized_tmp and bwrap is not None and scratch.bwrap_sizes_tmpfs(bwrap)
    seccomp: SeccompFilter | None = None
    seccomp_note = "no bubblewrap to load it" if not isolated else "turned off for this backend"
    if isolated and options.seccomp:
        try:
            seccomp, seccomp_note = sandbox_filter(), ""
        except SeccompUnavailable as exc:
            seccomp_note = str(exc)
    reap_stale(layout, tmp_root)
    return MachineProtections(options, isolated, layout, cgroups_note, tmp_root, tmp_note, sizes, seccomp, seccomp_note)


def leftovers_of(owner_pid: int, state_root: Path = scratch.DEFAULT_STATE_ROOT) -> list[Path]:
    """Sandbox cgroups, /tmp mounts and state directories a host process made that still exist
    (none once its sandboxes have ended, or once a later start-up reaped them)."""
    return [*cgroups.sandbox_cgroups_of(owner_pid), *scratch.state_of(state_root, owner_pid)]


def reap_stale(layout: CgroupLayout | None, state_root: Path | None) -> list[str]:
    """Kill and remove what sandboxes of dead host processes left: cgroups, /tmp mounts, state dirs."""
    reaped = cgroups.reap_stale(layout, owners.owner_is_dead) if layout is not None else []
    reaped += scratch.reap_stale(state_root, owners.owner_is_dead) if state_root is not None else []
    if reaped:
        log.warning("reaped %d sandbox resource(s) left by dead Fleet processes", len(reaped))
    return reaped


def protections_report(machine: MachineProtections, limits: SandboxLimits) -> list[Protection]:
    """One row per protection: enforced or missing on this machine, with a one-line reason."""
    layout = machine.layout
    rows = [
        _cgroup_row(
            "memory cgroup",
            layout,
            machine.cgroups_note,
            layout.memory if layout else None,
            cgroups.MEMORY,
            f"{limits.memory_mb} MB for all processes and /tmp together",
        ),
        _cgroup_row(
            "process-count cgroup",
            layout,
            machine.cgroups_note,
            layout.pids if layout else None,
            cgroups.PIDS,
            f"{limits.max_processes} processes and threads in all",
        ),
        _tmp_row(machine, limits),
        _cgroup_row(
            "CPU time",
            layout,
            machine.cgroups_note,
            layout.cpu if layout else None,
            cgroups.CPU,
            f"{limits.cpu_seconds}s for all processes together",
        ),
        _seccomp_row(machine),
        disk_quota_protection(machine, limits),
    ]
    return rows


def disk_quota_protection(machine: MachineProtections, limits: SandboxLimits) -> Protection:
    """The "disk quota" row: the workspace volume's own probe (``sandbox/volume.py``)."""
    if not machine.isolated:
        return Protection("disk quota", False, "no bubblewrap: the workspace is a plain host directory")
    support = quota_support()
    if not support.available:
        return Protection("disk quota", False, support.reason)
    return Protection(
        "disk quota",
        True,
        f"{limits.disk_mb} MB and {limits.max_files} files per workspace for all processes together "
        "(a loop-mounted ext4 volume)",
    )


def missing_protections(rows: list[Protection]) -> list[Protection]:
    return [row for row in rows if not row.enforced]


def refusal(rows: list[Protection]) -> str | None:
    """The one-line reason ``sandbox_require_limits`` refuses a sandbox; None when all are enforced."""
    missing = missing_protections(rows)
    if not missing:
        return None
    detail = "; ".join(f"{row.name} ({row.reason})" for row in missing)
    return f"refusing to start a sandbox that cannot be bounded (sandbox_require_limits is on): missing {detail}"


def _cgroup_row(
    name: str,
    layout: CgroupLayout | None,
    off_note: str,
    hierarchy: cgroups.Hierarchy | None,
    function: str,
    what: str,
) -> Protection:
    if layout is None:
        return Protection(name, False, off_note)
    note = layout.notes.get(function, "")
    if hierarchy is None:
        return Protection(name, False, note)
    extra = f"; {cgroups.swap_note(hierarchy)}" if function == cgroups.MEMORY else ""
    return Protection(name, True, f"{what} ({note}{extra})")


def _tmp_row(machine: MachineProtections, limits: SandboxLimits) -> Protection:
    if machine.tmp_root is not None:
        return Protection("sized /tmp", True, f"a {limits.memory_mb} MB tmpfs the host mounts under {machine.tmp_root}")
    if machine.bwrap_sizes_tmp:
        return Protection(
            "sized /tmp", True, f"a {limits.memory_mb} MB tmpfs bubblewrap mounts (host cannot: {machine.tmp_note})"
        )
    return Protection("sized /tmp", False, f"/tmp is an unbounded tmpfs: {machine.tmp_note}")


def _seccomp_row(machine: MachineProtections) -> Protection:
    if machine.seccomp is None:
        return Protection("seccomp", False, machine.seccomp_note)
    unknown = f"; not known to this libseccomp: {', '.join(machine.seccomp.unknown)}" if machine.seccomp.unknown else ""
    return Protection("seccomp", True, f"namespaces, mounts, ptrace, keyring, bpf, io_uring, modules denied{unknown}")


# -- one sandbox ---------------------------------------------------------------------------------


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
                self.cgroups.create(self.limits.memory_mb * MB, tasks)
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

    def enter(self) -> None:
        """In the child between fork and exec: join the sandbox's cgroups."""
        if self.cgroups is not None:
            self.cgroups.enter()

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
        self._wake = threading.Event()

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
        while not self._wake.wait(CPU_WATCH_INTERVAL):
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
