"""Listing the regular files of a workspace safely.

Symlinked directories are not descended into, a symlink whose target lies outside the workspace is
skipped (its content must never reach a prompt or a download), and FIFOs, sockets and devices are
skipped (opening a FIFO would block). Files that vanish while we look are skipped too: the sandbox
may be writing while a manifest is built.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fleet_rlm.workspace.layout import LAYOUT, TMP, Workspace
from fleet_rlm.workspace.paths import PathEscapeError, resolve_inside


@dataclass(frozen=True)
class WorkspaceFile:
    rel: str
    """Relative to the workspace root with ``/`` separators, e.g. ``"files/sales.csv"``."""
    path: Path
    """Absolute and symlink-resolved: where the bytes really are (inside the workspace)."""
    size: int
    mtime_ns: int
    inode: int


def workspace_root(workspace: Workspace | Path) -> Path:
    root = workspace.root if isinstance(workspace, Workspace) else workspace
    return root.resolve()


def list_rel_paths(root: Path, under: str | None = None, skip_top: frozenset[str] = frozenset({TMP})) -> list[str]:
    """Every file-like entry below ``root`` (or ``root/under``), as sorted relative paths.

    Sorted with the layout's directories first in layout order (inputs before outputs), then other
    top-level entries; within a directory, by name. Nothing is opened or stat'ed beyond listing.
    """
    start = root / under if under else root
    if not start.is_dir() or start.is_symlink():
        return []
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in skip_top]
            rel_dir = ""
        # Symlinked directories are neither walked nor listed.
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        found.extend(f"{rel_dir}/{name}" if rel_dir else name for name in filenames)
    return sorted(found, key=_layout_order)


def _layout_order(rel: str) -> tuple[int, str]:
    top = rel.split("/", 1)[0] if "/" in rel else ""
    rank = LAYOUT.index(top) if top in LAYOUT else len(LAYOUT)
    return rank, rel


def stat_file(root: Path, rel: str) -> WorkspaceFile | None:
    """``rel``'s facts if it is a regular file whose real location is inside ``root``, else None."""
    try:
        real = resolve_inside(root, rel)
        info = os.stat(real)
    except (PathEscapeError, OSError):
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return WorkspaceFile(rel=rel, path=real, size=info.st_size, mtime_ns=info.st_mtime_ns, inode=info.st_ino)


def iter_files(workspace: Workspace | Path, under: str | None = None) -> Iterator[WorkspaceFile]:
    """The workspace's regular files (``tmp/`` excluded), in :func:`list_rel_paths` order."""
    root = workspace_root(workspace)
    for rel in list_rel_paths(root, under):
        found = stat_file(root, rel)
        if found is not None:
            yield found
