"""Which artifacts a turn wrote: compare ``artifacts/`` before and after.

A file counts as written when it is new or its size or modification time changed. Deleted files
are not reported.
"""

from __future__ import annotations

from pathlib import Path

from fleet_rlm.workspace.layout import ARTIFACTS, Workspace
from fleet_rlm.workspace.tree import SafeTree
from fleet_rlm.workspace.walk import iter_files

Snapshot = dict[str, tuple[int, int]]
"""Relative path (``"artifacts/report.md"``) -> (size, mtime_ns)."""


def snapshot(workspace: Workspace | Path | SafeTree) -> Snapshot:
    """The size and modification time of every file under ``artifacts/``."""
    return {file.rel: (file.size, file.mtime_ns) for file in iter_files(workspace, under=ARTIFACTS)}


def changed_since(workspace: Workspace | Path | SafeTree, before: Snapshot) -> list[str]:
    """Files under ``artifacts/`` that are new or changed since ``before``, sorted by path."""
    return changed_between(before, snapshot(workspace))


def changed_between(before: Snapshot, after: Snapshot) -> list[str]:
    """Files of ``after`` that are new or changed since ``before``, sorted by path."""
    return sorted(rel for rel, facts in after.items() if before.get(rel) != facts)
