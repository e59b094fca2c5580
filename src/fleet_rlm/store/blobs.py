"""File bytes on disk, per session, addressed by their sha256.

``<root>/<session id>/blobs/<sha256>`` holds each distinct content once; the database maps paths to
digests. Writing a blob is idempotent and happens before the database commit that references it,
so a crash leaves at worst an unreferenced blob (removed by :meth:`BlobStore.collect_garbage`),
never a path pointing at missing or half-written bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO

CHUNK = 1024 * 1024


class TooLarge(ValueError):
    """The content exceeds the size limit it was given."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"larger than the limit of {limit} bytes")
        self.limit = limit


class BlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def session_dir(self, session_id: str) -> Path:
        return self.root / session_id

    def path(self, session_id: str, sha256: str) -> Path:
        return self.session_dir(session_id) / "blobs" / sha256

    def _staging(self, session_id: str) -> Path:
        staging = self.session_dir(session_id) / "staging"
        staging.mkdir(parents=True, exist_ok=True)
        return staging

    def _settle(self, session_id: str, temp: Path, sha256: str) -> Path:
        target = self.path(session_id, sha256)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            temp.unlink()
        else:
            os.replace(temp, target)
        return target

    def scratch_file(self, session_id: str, suffix: str = "") -> Path:
        """A new empty file in the session's staging area (gone with the session, or at the next
        garbage collection)."""
        fd, name = tempfile.mkstemp(dir=self._staging(session_id), suffix=suffix)
        os.close(fd)
        return Path(name)

    def put_stream(self, session_id: str, source: IO[bytes], limit: int | None = None) -> tuple[str, int]:
        """Copy ``source`` into a blob; returns (sha256, size). Raises TooLarge past ``limit`` bytes."""
        digest = hashlib.sha256()
        size = 0
        fd, name = tempfile.mkstemp(dir=self._staging(session_id))
        temp = Path(name)
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := source.read(CHUNK):
                    size += len(chunk)
                    if limit is not None and size > limit:
                        raise TooLarge(limit)
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        sha = digest.hexdigest()
        self._settle(session_id, temp, sha)
        return sha, size

    def put_file(self, session_id: str, source: Path) -> tuple[str, int]:
        """Store a copy of a finished file (e.g. an artifact of a torn-down sandbox), owned by us."""
        with source.open("rb") as handle:
            return self.put_stream(session_id, handle)

    def adopt(self, session_id: str, source: Path) -> tuple[str, int]:
        """Take a finished file of ours in the session's staging area (a :meth:`scratch_file`) as a
        blob, moving it rather than copying; returns (sha256, size)."""
        digest = hashlib.sha256()
        size = 0
        try:
            with source.open("rb") as handle:
                while chunk := handle.read(CHUNK):
                    size += len(chunk)
                    digest.update(chunk)
                os.fsync(handle.fileno())
        except BaseException:
            source.unlink(missing_ok=True)
            raise
        sha = digest.hexdigest()
        self._settle(session_id, source, sha)
        return sha, size

    def open(self, session_id: str, sha256: str) -> IO[bytes]:
        """A blob's bytes, to copy into a workspace (as an independent file: the reader may modify it)."""
        return self.path(session_id, sha256).open("rb")

    def collect_garbage(self, session_id: str, keep: Iterable[str]) -> int:
        """Remove staging leftovers and blobs not in ``keep``; returns how many files went."""
        removed = 0
        keep_set = set(keep)
        session_dir = self.session_dir(session_id)
        with contextlib.suppress(FileNotFoundError):
            for leftover in (session_dir / "staging").iterdir():
                leftover.unlink(missing_ok=True)
                removed += 1
        with contextlib.suppress(FileNotFoundError):
            for blob in (session_dir / "blobs").iterdir():
                if blob.name not in keep_set:
                    blob.unlink(missing_ok=True)
                    removed += 1
        return removed

    def session_ids(self) -> set[str]:
        if not self.root.is_dir():
            return set()
        return {entry.name for entry in self.root.iterdir() if entry.is_dir()}

    def remove_session(self, session_id: str) -> None:
        shutil.rmtree(self.session_dir(session_id), ignore_errors=True)
