"""The sandbox's ``/tmp``: a tmpfs of bounded size the host mounts in a root-only state directory.

``<state root>/<sandbox name>/tmp`` (state root and sandbox directory mode 0700, owned by root) gets
a tmpfs of the memory limit's size (``nosuid,nodev``, mode 1777, inodes bounded); bubblewrap binds
it at ``/tmp``. Its pages are charged to the process that writes them, so to the sandbox's memory
cgroup. The host never looks inside: at teardown it unmounts the mount point (lazily if busy) and
removes the two empty directories. Only root can mount; elsewhere :func:`bwrap_sizes_tmpfs` says
whether bubblewrap can size its own tmpfs instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

from fleet_rlm.sandbox.owners import PREFIX, new_name

DEFAULT_STATE_ROOT = Path("/run/fleet/sandboxes")
INODES_PER_MB = 64  # one inode per 16 KiB of /tmp
MS_NOSUID, MS_NODEV = 0x2, 0x4
MNT_DETACH, UMOUNT_NOFOLLOW = 0x2, 0x8


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(target: Path, options: str) -> None:
    libc = _libc()
    if libc.mount(b"tmpfs", os.fsencode(target), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"cannot mount a tmpfs on {target}: {os.strerror(code)}")


def _unmount(target: Path) -> None:
    """Unmount ``target`` (never following a link); detach it lazily when it is busy."""
    libc = _libc()
    path = os.fsencode(target)
    if libc.umount2(path, UMOUNT_NOFOLLOW) == 0:
        return
    code = ctypes.get_errno()
    if code == errno.EBUSY and libc.umount2(path, UMOUNT_NOFOLLOW | MNT_DETACH) == 0:
        return
    code = ctypes.get_errno() if code == errno.EBUSY else code
    if code != errno.EINVAL:  # EINVAL: nothing mounted there
        raise OSError(code, f"cannot unmount {target}: {os.strerror(code)}")


def prepare_state_root(root: Path) -> None:
    """Make the state root (and its parent) root-only directories, refusing anything else there."""
    for directory in (root.parent, root):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise OSError(errno.EPERM, f"{directory} is not a directory owned by this user")
        os.chmod(directory, 0o700)


def probe_state_root(root: Path) -> str | None:
    """Why the host cannot give sandboxes a sized /tmp under ``root``; None when it can."""
    if os.getuid() != 0:
        return "the host is not root, so it cannot mount a tmpfs for the sandbox"
    try:
        prepare_state_root(root)
        probe = SizedTmp(root, new_name(), 1)
        probe.create()
        probe.remove()
    except OSError as exc:
        return str(exc)
    return None


class SizedTmp:
    """One sandbox's host-mounted /tmp."""

    def __init__(self, root: Path, name: str, size_mb: int) -> None:
        self.directory = root / name
        self.mount_point = self.directory / "tmp"
        self.size_mb = size_mb

    def create(self) -> None:
        options = f"size={self.size_mb}m,nr_inodes={max(1024, self.size_mb * INODES_PER_MB)},mode=1777"
        self.directory.mkdir(mode=0o700)
        try:
            self.mount_point.mkdir(mode=0o700)
            _mount_tmpfs(self.mount_point, options)
        except OSError:
            self.remove()
            raise

    def remove(self) -> None:
        """Unmount and remove; never enters the tmpfs (it is the sandbox's, so hostile)."""
        if not self.directory.exists():
            return
        if self.mount_point.exists():
            _unmount(self.mount_point)
            self.mount_point.rmdir()
        self.directory.rmdir()


def reap_stale(root: Path, owner_is_dead: Callable[[str], bool]) -> list[str]:
    """Unmount and remove the /tmp of sandboxes whose host process is gone; returns their names."""
    reaped = []
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        for entry in entries:
            if entry.name.startswith(PREFIX) and entry.is_dir(follow_symlinks=False) and owner_is_dead(entry.name):
                with contextlib.suppress(OSError):
                    SizedTmp(root, entry.name, 0).remove()
                    reaped.append(entry.name)
    return reaped


def state_of(root: Path, owner_pid: int) -> list[Path]:
    """The /tmp mounts and state directories under ``root`` a host process made that still exist."""
    found: list[Path] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = Path(line.split()[4].replace("\\040", " "))
            if point.parent.parent == root and _owned_by(point.parent.name, owner_pid):
                found.append(point)
    with contextlib.suppress(OSError), os.scandir(root) as entries:
        found += [Path(entry.path) for entry in entries if _owned_by(entry.name, owner_pid)]
    return found


def _owned_by(name: str, owner_pid: int) -> bool:
    parts = name.split("-")
    return name.startswith(PREFIX) and len(parts) == 5 and parts[2] == str(owner_pid)


@functools.cache
def bwrap_sizes_tmpfs(bwrap: str) -> bool:
    """Whether this bubblewrap has ``--size`` (0.7+), to cap the tmpfs it mounts itself."""
    try:
        usage = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "--size" in usage
