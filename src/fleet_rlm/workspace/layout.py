"""A workspace: the directory a sandbox works in, with a fixed layout.

``files/`` holds the inputs a person gave, ``artifacts/`` the outputs they keep, ``memory/`` what
persists between turns for the model itself, and ``tmp/`` scratch space nobody is shown.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from fleet_rlm.workspace.paths import PathEscapeError, resolve_inside

FILES = "files"
ARTIFACTS = "artifacts"
MEMORY = "memory"
TMP = "tmp"
LAYOUT = (FILES, ARTIFACTS, MEMORY, TMP)

_Writer = Callable[[BinaryIO], object]


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def create(cls, root: Path) -> Workspace:
        """Make ``root`` and its layout (idempotent: existing content is left alone)."""
        root = root.expanduser().resolve()
        if root.exists() and not root.is_dir():
            raise NotADirectoryError(f"workspace root {root} exists and is not a directory")
        for name in LAYOUT:
            (root / name).mkdir(parents=True, exist_ok=True)
        return cls(root)

    @property
    def files_dir(self) -> Path:
        return self.root / FILES

    @property
    def artifacts_dir(self) -> Path:
        return self.root / ARTIFACTS

    @property
    def memory_dir(self) -> Path:
        return self.root / MEMORY

    @property
    def tmp_dir(self) -> Path:
        return self.root / TMP

    def resolve(self, rel_path: str) -> Path:
        """``rel_path`` (relative to the root) as a safe absolute path; raises PathEscapeError."""
        return resolve_inside(self.root, rel_path)

    def add_file(self, src: Path, dest: str | None = None) -> Path:
        """Copy the host file ``src`` into ``files/`` (as ``dest``, relative to ``files/``; default its
        name), replacing any file already there. Returns the new path."""
        if not src.is_file():
            raise FileNotFoundError(f"cannot add {src} to the workspace: not an existing regular file")
        target = resolve_inside(self.files_dir, src.name if dest is None else dest)
        with src.open("rb") as source:
            return self._write_atomically(target, lambda out: shutil.copyfileobj(source, out, 1 << 20))

    def write_bytes(self, rel_path: str, data: bytes) -> Path:
        """Write ``data`` to ``rel_path`` (relative to the root, e.g. ``"artifacts/out.txt"``),
        creating parent directories. The file appears complete or not at all. Returns its path."""
        target = self.resolve(rel_path)
        return self._write_atomically(target, lambda out: out.write(data))

    def _write_atomically(self, target: Path, write: _Writer) -> Path:
        if target.is_dir():
            raise IsADirectoryError(f"cannot write {target}: it is a directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        # Re-check after mkdir: a parent created by someone else in between could be a symlink.
        if not target.parent.resolve().is_relative_to(self.root.resolve()):
            raise PathEscapeError(str(target), "the parent directory resolves outside the workspace")
        # Stage in tmp/ (same filesystem, never shown to anyone) so readers never see half a file.
        staging = self.tmp_dir if self.tmp_dir.is_dir() else target.parent
        fd, temp_name = tempfile.mkstemp(dir=staging, prefix=".incoming-")
        try:
            os.fchmod(fd, 0o644)  # mkstemp makes 0600; the sandbox must be able to read it
            with os.fdopen(fd, "wb") as out:
                write(out)
            os.replace(temp_name, target)
        except BaseException:
            Path(temp_name).unlink(missing_ok=True)
            raise
        return target
