"""Workspace volumes: the directory a sandbox works in, bounded in bytes and in files.

As root, a volume is a sparse ext4 image of ``disk_mb`` MiB with ``max_files`` inodes, loop-mounted
``nosuid,nodev`` at ``<directory>/volume``; the workspace is ``<directory>/volume/workspace``. Every
process of every sandbox on it shares that bound, and the image only takes the disk space that is
written. Where the host cannot mount (not root, no loop devices, no ``mkfs.ext4``), a volume is a
plain directory and the disk quota is reported missing (``fleet doctor``), which
``sandbox_require_limits`` turns into a refusal.

The directory holding a volume is the host's own (mode 0700): the workspace inside is shared by
the sandboxes' uids (mode 0777), so nothing else on the host may reach it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from fleet_rlm.sandbox import owners

REGISTRY = Path("/run/fleet/volumes")
"""One file per mounted volume, named after its owner process, holding the volume's directory: how
a later Fleet process finds and removes volumes whose process died without releasing them."""
IMAGE = "disk.img"
MOUNT = "volume"
WORKSPACE = "workspace"
_MOUNT_OPTIONS = "loop,nosuid,nodev,noatime"
_TOOL_TIMEOUT = 30.0


class VolumeError(RuntimeError):
    """A bounded volume could not be made; the message says why."""


@dataclass(frozen=True)
class QuotaSupport:
    available: bool
    reason: str


@dataclass
class Volume:
    """One workspace volume. :meth:`release` unmounts it (lazily, if a sandbox still holds it)
    and removes its directory."""

    directory: Path
    workspace: Path
    disk_mb: int | None = None
    """The bound in MiB, or None for a plain directory."""
    max_files: int | None = None
    registration: Path | None = None

    @property
    def bounded(self) -> bool:
        return self.disk_mb is not None

    def release(self) -> None:
        remove_volume_directory(self.directory)
        if self.registration is not None:
            self.registration.unlink(missing_ok=True)


def remove_volume_directory(directory: Path) -> None:
    """Unmount whatever is mounted below ``directory``, then remove it."""
    release_mounts_under(directory)
    shutil.rmtree(directory, ignore_errors=True)


def quota_support() -> QuotaSupport:
    """Whether this process can make bounded volumes, and if not, why."""
    if os.geteuid() != 0:
        return QuotaSupport(False, "only root can mount a bounded workspace volume")
    missing = [tool for tool in ("mkfs.ext4", "mount", "umount") if shutil.which(tool) is None]
    if missing:
        return QuotaSupport(False, f"{', '.join(missing)} not installed (apt-get install e2fsprogs mount)")
    if not os.path.exists("/dev/loop-control"):
        return QuotaSupport(False, "no loop devices (/dev/loop-control is missing)")
    return QuotaSupport(True, "workspaces are loop-mounted ext4 images bounded in bytes and files")


def private_directory(path: Path) -> Path:
    """``path`` made (with parents) and closed to everyone but its owner."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def plain_volume(directory: Path) -> Volume:
    """A volume without a disk bound: a plain directory."""
    private_directory(directory)
    workspace = directory / WORKSPACE
    workspace.mkdir(exist_ok=True)
    return Volume(directory, workspace)


def bounded_volume(directory: Path, *, disk_mb: int, max_files: int) -> Volume:
    """A loop-mounted ext4 volume of ``disk_mb`` MiB and ``max_files`` inodes; raises VolumeError."""
    support = quota_support()
    if not support.available:
        raise VolumeError(f"cannot bound the workspace's disk: {support.reason}")
    reap_stale_volumes()
    private_directory(directory)
    registration = _register(directory)
    image, mount = directory / IMAGE, directory / MOUNT
    try:
        with open(image, "wb") as handle:
            handle.truncate(disk_mb * 1024 * 1024)
        _run(
            "mkfs.ext4",
            "-q",
            "-F",
            "-m",
            "0",
            "-N",
            str(max_files),
            "-O",
            "^has_journal",
            "-E",
            "lazy_itable_init=1,nodiscard",
            str(image),
        )
        mount.mkdir(exist_ok=True)
        _run("mount", "-o", _MOUNT_OPTIONS, str(image), str(mount))
        with contextlib.suppress(OSError):
            os.rmdir(mount / "lost+found")
        workspace = mount / WORKSPACE
        workspace.mkdir()
    except BaseException:
        remove_volume_directory(directory)
        registration.unlink(missing_ok=True)
        raise
    return Volume(directory, workspace, disk_mb=disk_mb, max_files=max_files, registration=registration)


def _register(directory: Path) -> Path:
    REGISTRY.mkdir(parents=True, exist_ok=True)
    os.chmod(REGISTRY, 0o700)
    entry = REGISTRY / owners.new_name()
    entry.write_text(str(directory.resolve()))
    return entry


_reaped = threading.Event()
_reap_lock = threading.Lock()


def reap_stale_volumes(*, force: bool = False) -> list[str]:
    """Unmount and remove the volumes of Fleet processes that died (once per process unless forced)."""
    with _reap_lock:
        if _reaped.is_set() and not force:
            return []
        _reaped.set()
        removed: list[str] = []
        if not REGISTRY.is_dir():
            return removed
        for entry in REGISTRY.iterdir():
            if not owners.owner_is_dead(entry.name):
                continue
            with contextlib.suppress(OSError):
                directory = Path(entry.read_text().strip())
                if directory.is_absolute():
                    remove_volume_directory(directory)
                    removed.append(str(directory))
            entry.unlink(missing_ok=True)
        return removed


def release_mounts_under(directory: Path) -> None:
    """Detach every mount at or below ``directory`` (deepest first); a busy one goes lazily."""
    for mount_point in sorted(mounts_under(directory), key=len, reverse=True):
        with contextlib.suppress(VolumeError):
            _run("umount", "-l", mount_point)


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or below ``directory`` in this process's mount namespace."""
    base = str(directory.resolve()) if directory.exists() else str(directory)
    found = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8") as info:
        for line in info:
            fields = line.split()
            if len(fields) > 4:
                point = _unescape(fields[4])
                if point == base or point.startswith(base + "/"):
                    found.append(point)
    return found


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _run(*command: str) -> None:
    try:
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=_TOOL_TIMEOUT)
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or exc.stdout or "").strip().splitlines()
        raise VolumeError(f"{command[0]} failed: {detail[-1] if detail else f'exit status {exc.returncode}'}") from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VolumeError(f"{command[0]} failed: {exc}") from exc
