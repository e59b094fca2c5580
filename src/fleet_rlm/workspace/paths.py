"""Turning a client- or model-supplied relative path into a path that is certainly inside a root.

Uploads, downloads and the manifest all go through :func:`resolve_inside`, so it is deliberately
strict: anything that is not a plain relative path made of ordinary names is refused, and the
result is checked again after following symlinks.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path, PurePosixPath


class PathEscapeError(ValueError):
    """A path was refused because it is malformed or would leave the workspace; the message names it."""

    def __init__(self, path: object, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"refused path {path!r}: {reason}")


def split_rel(rel: str) -> tuple[str, ...]:
    """The names of a plain relative path; raises :class:`PathEscapeError` for anything else: a
    non-string, an empty path (or one naming the root itself, like ``"."``), NUL bytes, backslashes
    (not a separator here, and a traversal on Windows clients), an absolute path, any ``..``."""
    if not isinstance(rel, str):
        raise PathEscapeError(rel, f"expected a string, got {type(rel).__name__}")
    if not rel.strip():
        raise PathEscapeError(rel, "the path is empty")
    if "\x00" in rel:
        raise PathEscapeError(rel, "the path contains a NUL byte")
    if "\\" in rel:
        raise PathEscapeError(rel, "the path contains a backslash; use '/' between names")
    pure = PurePosixPath(rel)
    if pure.is_absolute():
        raise PathEscapeError(rel, "the path is absolute; give it relative to the workspace")
    if ".." in pure.parts:
        raise PathEscapeError(rel, "the path contains a '..' component")
    if not pure.parts:
        raise PathEscapeError(rel, "the path names the workspace root itself, not something inside it")
    return pure.parts


def resolve_inside(root: Path, rel: str) -> Path:
    """The absolute, symlink-resolved path of ``rel`` under ``root``; raises :class:`PathEscapeError`.

    Refused: whatever :func:`split_rel` refuses, and anything that resolves outside ``root`` once
    symlinks are followed (a symlink loop counts as outside). The target need not exist, so this also vets upload paths.
    The result lies under ``root.resolve()``.
    """
    pure = PurePosixPath(*split_rel(rel))

    base = root.resolve()
    try:
        resolved = (base / pure).resolve()
    except (RuntimeError, OSError) as exc:  # RuntimeError: a symlink loop (Python 3.11)
        raise PathEscapeError(rel, f"the path cannot be resolved ({exc})") from exc
    if resolved == base:
        raise PathEscapeError(rel, "the path resolves to the workspace root itself (through a symlink)")
    if not resolved.is_relative_to(base):
        raise PathEscapeError(rel, "the path resolves outside the workspace (through a symlink)")
    return resolved


def control_character(text: str) -> str | None:
    """The first control character (Unicode category Cc: C0, DEL, C1) in ``text``, or None."""
    return next((char for char in text if unicodedata.category(char) == "Cc"), None)
