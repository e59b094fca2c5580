"""The one way the host touches a tree that sandbox code can write: through directory descriptors.

Everything under a workspace may have been written by hostile code, possibly while we look. So the
host never resolves a path there by name: it opens the trusted root, then each component relative
to its parent's descriptor with ``O_NOFOLLOW`` (a symlink anywhere fails instead of leading out),
opens files with ``O_NONBLOCK`` (a FIFO cannot block it) and uses a file only once ``fstat`` on the
open descriptor says it is regular. Writes go to a fresh ``O_EXCL`` name beside the target and are
renamed into place, so a link or FIFO planted at the target is replaced, never written through.
Links and special files met while walking are skipped and remembered in :attr:`SafeTree.skipped`,
so callers can tell the person. What the host copies out of such a tree is bounded while it reads
(:meth:`SafeTree.open_bounded`): a sparse file is refused, and a file that grows past its bound
stops the copy, whatever a stat said before.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from fleet_rlm.workspace.paths import PathEscapeError, split_rel

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_NOT_A_DIRECTORY = (errno.ELOOP, errno.ENOTDIR)
MAX_DEPTH = 64
"""Directories nested deeper than this are not walked (each level holds a descriptor open)."""
SPARSE_SLACK = 1 << 20
"""Bytes of holes a file copied out may have: more is refused, it costs the sandbox's volume nothing."""
STAGING_PREFIX = ".incoming-"
SHARED_FILE_MODE = 0o666
SHARED_DIR_MODE = 0o777
"""Modes of what the host writes into a sandbox workspace: every sandbox uid may change it."""


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class UnsafeEntry(OSError):
    """A path leads through a link or names something that is not a regular file or directory."""

    def __init__(self, rel: str, what: str) -> None:
        self.rel = rel
        self.what = what
        super().__init__(errno.EPERM, f"{rel} is {what}; it was not followed or opened")


class OverBound(OSError):
    """A file the host would copy out holds more bytes than it may take, is sparse, or grew while copied."""

    def __init__(self, rel: str, why: str, *, past_limit: bool = False) -> None:
        self.rel = rel
        self.why = why
        self.past_limit = past_limit
        """True when the file is larger than the caller's limit (the caller names its bound); else
        :attr:`why` says all (sparse, or grown past the size it had when it was opened)."""
        super().__init__(errno.EFBIG, f"{rel}: {why}")


class BoundedReader:
    """Reads of an open file that stop at the size it had when it was opened and checked for holes: one
    byte more raises :class:`OverBound`, and so does reaching its end when it has become sparse since
    (a writer sees the end before it keeps the copy)."""

    def __init__(self, handle: io.BufferedReader, rel: str, size: int) -> None:
        self._handle = handle
        self._rel = rel
        self._size = size
        self._left = size

    def read(self, size: int = -1, /) -> bytes:
        want = self._left + 1 if size < 0 else min(size, self._left + 1)
        data = self._handle.read(want)
        self._left -= len(data)
        if self._left < 0:
            raise OverBound(self._rel, f"it grew past its {self._size} bytes while it was copied out")
        if not data and want:
            _refuse_sparse(self._handle.fileno(), self._rel)
        return data


@dataclass(frozen=True)
class TreeEntry:
    """A regular file found in a tree, with the facts ``fstatat`` gave without following links."""

    rel: str
    size: int
    mtime_ns: int
    inode: int
    mode: int


@dataclass(frozen=True)
class Skipped:
    rel: str
    what: str
    """e.g. "a symbolic link", "a FIFO"."""


def describe(mode: int) -> str:
    """What a non-regular file is, for messages."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


@dataclass
class SafeTree:
    """A directory tree that sandbox code can write, handled only through descriptors.

    ``root`` itself is trusted: the host made it and sandbox code cannot replace it (it is a mount
    point or lies outside the sandbox's view). Everything below it is not.
    """

    root: Path
    skipped: list[Skipped] = field(default_factory=list)

    # -- directories -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def directory(self, parts: tuple[str, ...], *, create: bool = False, mode: int = SHARED_DIR_MODE) -> Iterator[int]:
        """A descriptor of the directory ``parts`` below the root, made (with ``mode``) if asked."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for depth, name in enumerate(parts):
                child = _child_dir(fd, name, "/".join(parts[: depth + 1]), create, mode)
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def make_dirs(self, rel: str, mode: int = SHARED_DIR_MODE) -> None:
        with self.directory(split_rel(rel), create=True, mode=mode):
            pass

    # -- reading ---------------------------------------------------------------------------------

    def open(self, rel: str) -> io.BufferedReader:
        """``rel`` opened for reading, if it is a regular file reached without links; else UnsafeEntry."""
        parts = split_rel(rel)
        with self.directory(parts[:-1]) as parent:
            try:
                fd = os.open(parts[-1], _READ_FLAGS, dir_fd=parent)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise UnsafeEntry(rel, "a symbolic link") from exc
                if exc.errno == errno.ENXIO:
                    raise UnsafeEntry(rel, "a socket") from exc
                raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise UnsafeEntry(rel, describe(info.st_mode))
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    @contextlib.contextmanager
    def open_bounded(self, rel: str, limit: int) -> Iterator[BoundedReader]:
        """``rel`` for copying out, costing the host no more than it costs the sandbox's volume: a file
        with more than :data:`SPARSE_SLACK` bytes of holes, or more than ``limit`` bytes, is refused at
        once (:class:`OverBound`); the reader then stops at the size the file had here (growing it
        raises), and checks for holes again at its end (holes punched meanwhile raise too)."""
        with self.open(rel) as handle:
            size = _refuse_sparse(handle.fileno(), rel)
            if size > limit:
                raise OverBound(rel, f"it is larger than its bound of {limit} bytes", past_limit=True)
            yield BoundedReader(handle, rel, size)

    def read_bytes(self, rel: str, limit: int) -> bytes:
        """At most ``limit`` bytes of ``rel``; ValueError if it holds more."""
        with self.open(rel) as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise ValueError(f"{rel} is larger than {limit} bytes")
        return data

    def entry(self, rel: str) -> TreeEntry | None:
        """``rel``'s facts if it is a regular file reached without links, else None."""
        try:
            parts = split_rel(rel)
            with self.directory(parts[:-1]) as parent:
                info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except (OSError, PathEscapeError):
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        return _entry(rel, info)

    def walk(self, under: str | None = None, *, skip_top: frozenset[str] = frozenset()) -> list[TreeEntry]:
        """Every regular file below the root (or ``under``), sorted by path.

        Links and special files are not followed or opened; they are added to :attr:`skipped`.
        Directories named in ``skip_top`` (at the root) are not entered. Entries that vanish while
        we look are left out.
        """
        found: list[TreeEntry] = []
        parts = split_rel(under) if under else ()
        try:
            with self.directory(parts) as fd:
                self._walk(fd, under or "", found, skip_top if not under else frozenset(), 0)
        except UnsafeEntry as exc:
            self.skipped.append(Skipped(exc.rel, exc.what))
        except (FileNotFoundError, NotADirectoryError):
            pass
        return sorted(found, key=lambda entry: entry.rel)

    def _walk(self, fd: int, prefix: str, found: list[TreeEntry], skip: frozenset[str], depth: int) -> None:
        with os.scandir(fd) as entries:
            listed = list(entries)
        for item in listed:
            rel = f"{prefix}/{item.name}" if prefix else item.name
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found.append(_entry(rel, info))
            elif stat.S_ISDIR(info.st_mode):
                if item.name in skip:
                    continue
                if depth + 1 >= MAX_DEPTH:
                    self.skipped.append(Skipped(rel, f"nested deeper than {MAX_DEPTH} directories"))
                    continue
                try:
                    child = _open_dir_at(fd, item.name, rel)
                except UnsafeEntry as exc:  # replaced by a link since we listed it
                    self.skipped.append(Skipped(exc.rel, exc.what))
                    continue
                except OSError:
                    continue
                try:
                    self._walk(child, rel, found, frozenset(), depth + 1)
                finally:
                    os.close(child)
            else:
                self.skipped.append(Skipped(rel, describe(info.st_mode)))

    def take_skipped(self) -> list[Skipped]:
        """What walks skipped since the last call (each path once)."""
        taken, self.skipped = self.skipped, []
        unique: dict[str, Skipped] = {}
        for item in taken:
            unique.setdefault(item.rel, item)
        return list(unique.values())

    # -- writing ---------------------------------------------------------------------------------

    def write(
        self, rel: str, source: Readable | bytes, *, mode: int = SHARED_FILE_MODE, dir_mode: int = SHARED_DIR_MODE
    ) -> int:
        """Write ``source`` to ``rel`` (parents made), whole or not at all; returns the bytes written.

        Whatever ``rel`` named before (a file, a link, a FIFO) is replaced by the new file; a
        directory there is refused (IsADirectoryError).
        """
        parts = split_rel(rel)
        with self.directory(parts[:-1], create=True, mode=dir_mode) as parent:
            staging = f"{STAGING_PREFIX}{secrets.token_hex(8)}"
            fd = os.open(staging, _CREATE_FLAGS, 0o600, dir_fd=parent)
            try:
                os.fchmod(fd, mode)
                with os.fdopen(fd, "wb", closefd=False) as out:
                    if isinstance(source, bytes):
                        out.write(source)
                    else:
                        shutil.copyfileobj(source, out, 1 << 20)
                written = os.fstat(fd).st_size
                os.close(fd)
                fd = -1
                os.rename(staging, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException as exc:
                if fd >= 0:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(staging, dir_fd=parent)
                if isinstance(exc, OSError) and exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise IsADirectoryError(errno.EISDIR, f"cannot write {rel}: it is a directory") from exc
                raise
        return written

    def copy_from(self, source: SafeTree, source_rel: str, rel: str, *, mode: int = SHARED_FILE_MODE) -> int:
        """Copy a regular file of another tree (never through a link) to ``rel`` here."""
        with source.open(source_rel) as handle:
            return self.write(rel, handle, mode=mode)

    def remove(self, rel: str) -> None:
        """Unlink ``rel`` (a link is removed itself, never followed); missing is fine."""
        parts = split_rel(rel)
        try:
            with self.directory(parts[:-1]) as parent:
                os.unlink(parts[-1], dir_fd=parent)
        except FileNotFoundError:
            pass


def _refuse_sparse(fd: int, rel: str) -> int:
    """The open file's size, unless it has more than :data:`SPARSE_SLACK` bytes of holes (OverBound)."""
    size, holes = hole_bytes(fd, SPARSE_SLACK)
    if holes > SPARSE_SLACK:
        allocated = os.fstat(fd).st_blocks * 512
        raise OverBound(rel, f"it is sparse ({size} bytes, {allocated} allocated: over {SPARSE_SLACK} bytes of holes)")
    return size


def hole_bytes(fd: int, enough: int) -> tuple[int, int]:
    """The open file ``fd``'s size and the bytes of holes in it, counted until more than ``enough`` (then
    a lower bound); its offset is left where it was.

    Holes are found with ``SEEK_HOLE``/``SEEK_DATA`` rather than guessed from ``st_blocks``: a file on
    a compressing file system is allocated less than its size without a hole. A file system without
    them reports one extent of data (no hole). Every hole is at least a block, so the walk is short."""
    size = os.fstat(fd).st_size
    offset = os.lseek(fd, 0, os.SEEK_CUR)
    holes = 0
    at = 0
    try:
        while at < size and holes <= enough:
            hole = os.lseek(fd, at, os.SEEK_HOLE)
            if hole >= size:
                break
            try:
                data = os.lseek(fd, hole, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # no data after the hole: it runs to the end
                    raise
                data = size
            holes += max(0, min(data, size) - hole)
            at = max(data, hole + 1)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENXIO):
            raise
    finally:
        os.lseek(fd, offset, os.SEEK_SET)
    return size, holes


def _child_dir(parent: int, name: str, rel: str, create: bool, mode: int) -> int:
    try:
        return _open_dir_at(parent, name, rel)
    except FileNotFoundError:
        if not create:
            raise
    made = True
    try:
        os.mkdir(name, mode, dir_fd=parent)
    except FileExistsError:
        made = False
    child = _open_dir_at(parent, name, rel)
    if made:
        os.fchmod(child, mode)  # mkdir's mode is cut by the umask
    return child


def _open_dir_at(parent: int, name: str, rel: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in _NOT_A_DIRECTORY:
            try:
                info = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except OSError:
                raise UnsafeEntry(rel, "not a directory") from exc
            raise UnsafeEntry(rel, describe(info.st_mode)) from exc
        raise


def _entry(rel: str, info: os.stat_result) -> TreeEntry:
    return TreeEntry(rel=rel, size=info.st_size, mtime_ns=info.st_mtime_ns, inode=info.st_ino, mode=info.st_mode)
