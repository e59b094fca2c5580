"""Streaming SHA-256 of workspace files, remembered per (path, size, mtime, inode).

A manifest is built before every turn, and inputs can be gigabytes: an unchanged file is hashed
(and previewed) once per process. The hashing pass also counts newlines, so a large text file's
line count costs nothing extra.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class FileDigest:
    sha256: str
    newlines: int
    """How many ``\\n`` bytes the file holds."""


_Key = tuple[str, int, int, int, Hashable]
T = TypeVar("T")


class DigestCache:
    """Facts about files remembered by (real path, size, mtime_ns, inode): digests, and anything
    else derived from a file's content (the manifest keeps its entries here). Thread-safe; the
    least recently used fact goes first when full."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[_Key, object] = OrderedDict()
        self._lock = threading.Lock()

    def digest(self, path: Path) -> FileDigest:
        """The digest of the file at ``path``, hashing it only if it changed since last asked."""
        return self.remember(path, "sha256", lambda: hash_file(path))

    def remember(self, path: Path, purpose: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``'s result for the file at ``path`` as it is now, computed once per version.

        ``purpose`` tells apart different facts about one file (and must capture any option the
        fact depends on). A result is kept only if the file did not change while it was computed.
        """
        before = os.stat(path)
        key = (str(path), before.st_size, before.st_mtime_ns, before.st_ino, purpose)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return cast(T, self._entries[key])
            self.misses += 1
        value = compute()
        after = os.stat(path)
        if (after.st_size, after.st_mtime_ns, after.st_ino) == key[1:4]:
            with self._lock:
                self._entries[key] = value
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def hash_file(path: Path) -> FileDigest:
    """SHA-256 and newline count of ``path``, read in 1 MiB chunks (memory stays flat)."""
    sha = hashlib.sha256()
    newlines = 0
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    with path.open("rb", buffering=0) as f:
        while n := f.readinto(buffer):
            sha.update(view[:n])
            newlines += buffer.count(b"\n", 0, n)
    return FileDigest(sha256=sha.hexdigest(), newlines=newlines)


default_cache = DigestCache()
