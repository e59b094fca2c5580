"""Whole-sandbox limits: what this machine can enforce for sandboxes.

:class:`MachineProtections` is detected once per process and option set (the first detection also
reaps the cgroups and /tmp mounts that dead host processes left); :func:`protections_report` turns
it into one row per protection for ``fleet doctor`` and ``sandbox_require_limits``. Each sandbox
gets a :class:`~fleet_rlm.sandbox.guard.SandboxGuard` that applies them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from pathlib import Path

from fleet_rlm.sandbox import cgroups, owners, scratch
from fleet_rlm.sandbox.base import SandboxLimits
from fleet_rlm.sandbox.cgroups import CgroupLayout
from fleet_rlm.sandbox.guard import SandboxGuard
from fleet_rlm.sandbox.seccomp import SeccompFilter, SeccompUnavailable, sandbox_filter
from fleet_rlm.sandbox.volume import quota_support

log = logging.getLogger(__name__)


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
    required: bool = True
    """Missing, it refuses sandboxes under ``sandbox_require_limits``; else it only serves the host."""


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
        _weight_row(machine, limits),
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
    """The required protections this machine cannot enforce."""
    return [row for row in rows if row.required and not row.enforced]


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


def _weight_row(machine: MachineProtections, limits: SandboxLimits) -> Protection:
    """Not required: without it a sandbox is bounded all the same, only the host is served less first."""
    row = _cgroup_row(
        "CPU weight",
        machine.layout,
        machine.cgroups_note,
        machine.layout.weight if machine.layout else None,
        cgroups.WEIGHT,
        f"{limits.cpu_weight} for all processes together, against 100 for a host process",
    )
    if row.enforced:
        return dataclasses.replace(row, required=False)
    return Protection(row.name, False, f"{row.reason}; busy sandboxes compete with the host as equals", required=False)


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
    return Protection("seccomp", True, "namespaces, mounts, ptrace, keyring, bpf, io_uring, modules denied")
