"""Listing the regular files of a workspace safely (see :mod:`fleet_rlm.workspace.tree`).

Links are never followed and FIFOs, sockets and devices never opened: they are skipped, and the
tree remembers them so the person can be told. Files that vanish while we look are skipped too:
the sandbox may be writing while a manifest is built.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fleet_rlm.workspace.layout import LAYOUT, NOT_LISTED, Workspace
from fleet_rlm.workspace.tree import SafeTree, TreeEntry


class FileChanged(OSError):
    """The file at a path is no longer the one that was listed."""


@dataclass(frozen=True)
class WorkspaceFile:
    rel: str
    """Relative to the workspace root with ``/`` separators, e.g. ``"files/sales.csv"``."""
    size: int
    mtime_ns: int
    inode: int
    tree: SafeTree = field(compare=False, repr=False)

    def open(self) -> io.BufferedReader:
        """The listed file, opened without following links; FileChanged if another file took its place."""
        handle = self.tree.open(self.rel)
        if os.fstat(handle.fileno()).st_ino != self.inode:
            handle.close()
            raise FileChanged(f"{self.rel} changed while it was read")
        return handle

    @property
    def identity(self) -> tuple[str, int, int, int]:
        """What names this version of the file: its place, size, modification time and inode."""
        return (f"{self.tree.root}/{self.rel}", self.size, self.mtime_ns, self.inode)


def workspace_root(workspace: Workspace | Path) -> Path:
    root = workspace.root if isinstance(workspace, Workspace) else workspace
    return root.resolve()


def tree_of(workspace: Workspace | Path | SafeTree) -> SafeTree:
    return workspace if isinstance(workspace, SafeTree) else SafeTree(workspace_root(workspace))


def _layout_order(rel: str) -> tuple[int, str]:
    top = rel.split("/", 1)[0] if "/" in rel else ""
    rank = LAYOUT.index(top) if top in LAYOUT else len(LAYOUT)
    return rank, rel


def iter_files(workspace: Workspace | Path | SafeTree, under: str | None = None) -> Iterator[WorkspaceFile]:
    """The workspace's regular files (``tmp/`` and ``skills/`` excluded), the layout's directories first in layout
    order (inputs before outputs), then other top-level entries; within a directory, by name."""
    tree = tree_of(workspace)
    entries = tree.walk(under, skip_top=NOT_LISTED)
    for entry in sorted(entries, key=lambda e: _layout_order(e.rel)):
        yield _file(tree, entry)


def stat_file(workspace: Workspace | Path | SafeTree, rel: str) -> WorkspaceFile | None:
    """``rel``'s facts if it is a regular file reached without links, else None."""
    tree = tree_of(workspace)
    entry = tree.entry(rel)
    return _file(tree, entry) if entry is not None else None


def _file(tree: SafeTree, entry: TreeEntry) -> WorkspaceFile:
    return WorkspaceFile(rel=entry.rel, size=entry.size, mtime_ns=entry.mtime_ns, inode=entry.inode, tree=tree)
