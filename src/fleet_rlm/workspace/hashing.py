"""Streaming SHA-256 of workspace files, remembered per (path, size, mtime, inode).

A manifest is built before every turn, and inputs can be gigabytes: an unchanged file is hashed
(and previewed) once per process. The hashing pass also counts newlines, so a large text file's
line count costs nothing extra.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

from cachetools import LRUCache

from fleet_rlm.workspace.tree import Readable
from fleet_rlm.workspace.walk import WorkspaceFile

CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class FileDigest:
    sha256: str
    newlines: int
    """How many ``\\n`` bytes the file holds."""


_Key = tuple[str, int, int, int, Hashable]
T = TypeVar("T")


class DigestCache:
    """Facts about files remembered by (path, size, mtime_ns, inode): digests, and anything
    else derived from a file's content (the manifest keeps its entries here). Thread-safe (a
    cachetools LRU cache under a lock); the least recently used fact goes first when full."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.hits = 0
        self.misses = 0
        self._entries: LRUCache[_Key, object] = LRUCache(maxsize=max_entries)
        self._lock = threading.Lock()

    def digest(self, file: WorkspaceFile) -> FileDigest:
        """The digest of ``file``, hashing it only if it changed since last asked."""
        return self.remember(file, "sha256", lambda: hash_workspace_file(file))

    def remember(self, file: WorkspaceFile, purpose: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``'s result for ``file`` as it was listed, computed once per version.

        ``purpose`` tells apart different facts about one file (and must capture any option the
        fact depends on). A result is kept only if the file did not change while it was computed.
        """
        key = (*file.identity, purpose)
        with self._lock:
            try:
                known = self._entries[key]  # a lookup makes it the most recently used
            except KeyError:
                self.misses += 1
            else:
                self.hits += 1
                return cast(T, known)
        value = compute()
        after = file.tree.entry(file.rel)
        if after is not None and (after.size, after.mtime_ns, after.inode) == key[1:4]:
            with self._lock:
                self._entries[key] = value
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def hash_stream(stream: io.BufferedIOBase | io.RawIOBase) -> FileDigest:
    """SHA-256 and newline count of what ``stream`` holds, read in 1 MiB chunks (memory stays flat)."""
    sha = hashlib.sha256()
    newlines = 0
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    while n := stream.readinto(buffer):
        sha.update(view[:n])
        newlines += buffer.count(b"\n", 0, n)
    return FileDigest(sha256=sha.hexdigest(), newlines=newlines)


class HashingReader:
    """Wraps a binary stream; what is read through it is hashed, so a copy needs no second pass."""

    def __init__(self, stream: Readable) -> None:
        self._stream = stream
        self._sha = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self._sha.update(data)
        return data

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()


def hash_workspace_file(file: WorkspaceFile) -> FileDigest:
    """The digest of a file in a sandbox-writable tree, read without following links."""
    with file.open() as stream:
        return hash_stream(stream)


def hash_copied_out(file: WorkspaceFile, limit: int) -> str:
    """The SHA-256 of a file the host would copy out, read through
    :meth:`~fleet_rlm.workspace.tree.SafeTree.open_bounded`: a sparse file, or one of more than
    ``limit`` bytes, raises ``OverBound`` before a byte is hashed (its holes would cost the host hours
    of hashing zeros)."""
    sha = hashlib.sha256()
    with file.tree.open_bounded(file.rel, limit) as reader:
        while chunk := reader.read(CHUNK_BYTES):
            sha.update(chunk)
    return sha.hexdigest()


def hash_file(path: Path) -> FileDigest:
    """The digest of a host-owned file (never one in a workspace: see :func:`hash_workspace_file`)."""
    with path.open("rb", buffering=0) as stream:
        return hash_stream(stream)


default_cache = DigestCache()
