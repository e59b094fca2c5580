"""Streaming SHA-256 of workspace files, remembered per (path, size, mtime, inode).

A manifest is built before every turn, and inputs can be gigabytes: an unchanged file is hashed
once per process. The same pass counts newlines, so a large text file's line count costs nothing
extra.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class FileDigest:
    sha256: str
    newlines: int
    """How many ``\\n`` bytes the file holds."""


_Key = tuple[str, int, int, int]


class DigestCache:
    """Digests of files by (real path, size, mtime_ns, inode); thread-safe, least recently used out."""

    def __init__(self, max_entries: int = 50_000) -> None:
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[_Key, FileDigest] = OrderedDict()
        self._lock = threading.Lock()

    def digest(self, path: Path) -> FileDigest:
        """The digest of the file at ``path``, hashing it only if it changed since last asked."""
        before = os.stat(path)
        key = (str(path), before.st_size, before.st_mtime_ns, before.st_ino)
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return cached
            self.misses += 1
        digest = hash_file(path)
        after = os.stat(path)
        if (after.st_size, after.st_mtime_ns, after.st_ino) == key[1:]:  # not written to while we read
            with self._lock:
                self._entries[key] = digest
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
        return digest

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
