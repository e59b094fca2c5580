"""Workspaces: the directory a sandbox works in, safe paths into it, and its manifest."""

from fleet_rlm.workspace.hashing import DigestCache, FileDigest
from fleet_rlm.workspace.kinds import FileKind
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.manifest import (
    Manifest,
    ManifestEntry,
    build_manifest,
    human_size,
    manifest_to_json,
    render_manifest,
)
from fleet_rlm.workspace.paths import PathEscapeError, resolve_inside
from fleet_rlm.workspace.previews import JsonPreview, Preview, TablePreview, TextPreview
from fleet_rlm.workspace.snapshot import Snapshot, changed_since, snapshot
from fleet_rlm.workspace.tree import SHARED_DIR_MODE, SafeTree, UnsafeEntry

__all__ = [
    "SHARED_DIR_MODE",
    "DigestCache",
    "FileDigest",
    "FileKind",
    "JsonPreview",
    "Manifest",
    "ManifestEntry",
    "PathEscapeError",
    "Preview",
    "SafeTree",
    "Snapshot",
    "TablePreview",
    "TextPreview",
    "UnsafeEntry",
    "Workspace",
    "build_manifest",
    "changed_since",
    "human_size",
    "manifest_to_json",
    "render_manifest",
    "resolve_inside",
    "snapshot",
]
