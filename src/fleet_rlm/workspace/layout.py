"""A workspace: the directory a sandbox works in, with a fixed layout.

``files/`` holds the inputs a person gave, ``artifacts/`` the outputs they keep, ``memory/`` what
persists between turns for the model itself, and ``tmp/`` scratch space nobody is shown.
``skills/`` is not made here: each turn installs a read-only copy of the skills there
(:mod:`fleet_rlm.skills.install`), and no host code reads it back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from fleet_rlm.workspace.paths import split_rel
from fleet_rlm.workspace.tree import SHARED_DIR_MODE, SafeTree, UnsafeEntry

FILES = "files"
ARTIFACTS = "artifacts"
MEMORY = "memory"
TMP = "tmp"
SKILLS = "skills"
NOT_LISTED = frozenset({TMP, SKILLS})
"""Top-level directories never listed, copied back or collected: scratch, and the installed skills."""
LAYOUT = (FILES, ARTIFACTS, MEMORY, TMP)


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def create(cls, root: Path, *, mode: int | None = None) -> Workspace:
        """Make ``root`` and its layout (idempotent: existing content is left alone). With ``mode``
        (``SHARED_DIR_MODE`` for a sandbox's workspace), the root and the directories this call
        makes get it."""
        root = root.expanduser().resolve()
        if root.exists() and not root.is_dir():
            raise NotADirectoryError(f"workspace root {root} exists and is not a directory")
        root.mkdir(parents=True, exist_ok=True)
        if mode is not None:
            os.chmod(root, mode)
        tree = SafeTree(root)
        for name in LAYOUT:
            tree.make_dirs(name, 0o755 if mode is None else mode)
        return cls(root)

    def restore_layout(self, mode: int = SHARED_DIR_MODE) -> list[str]:
        """Make the layout's directories again where sandbox code replaced one with something else (a
        file, a link, a pipe): that entry is unlinked, never followed. Returns the names restored."""
        tree = self.tree
        restored: list[str] = []
        for name in LAYOUT:
            try:
                tree.make_dirs(name, mode)
            except UnsafeEntry:
                tree.remove(name)
                tree.make_dirs(name, mode)
                restored.append(name)
        return restored

    @property
    def tree(self) -> SafeTree:
        """The workspace as sandbox code may have left it: to be read and written only through this."""
        return SafeTree(self.root)

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

    def add_file(self, src: Path, dest: str | None = None, *, mode: int = 0o644) -> Path:
        """Copy the host file ``src`` into ``files/`` (as ``dest``, relative to ``files/``; default its
        name), replacing any file already there. Returns its path."""
        if not src.is_file():
            raise FileNotFoundError(f"cannot add {src} to the workspace: not an existing regular file")
        rel = f"{FILES}/{'/'.join(split_rel(src.name if dest is None else dest))}"
        with src.open("rb") as source:
            self.tree.write(rel, source, mode=mode, dir_mode=_dir_mode(mode))
        return self.root.joinpath(*split_rel(rel))

    def write_bytes(self, rel_path: str, data: bytes, *, mode: int = 0o644) -> Path:
        """Write ``data`` to ``rel_path`` (relative to the root, e.g. ``"artifacts/out.txt"``),
        creating parent directories. The file appears complete or not at all. Returns its path."""
        self.tree.write(rel_path, data, mode=mode, dir_mode=_dir_mode(mode))
        return self.root.joinpath(*split_rel(rel_path))


def _dir_mode(file_mode: int) -> int:
    """Directories made for a file: searchable wherever the file is readable."""
    return file_mode | ((file_mode & 0o444) >> 2)
