"""The manifest: what is in a workspace, as the model (and the API) sees it.

One entry per file (``tmp/`` excluded): its relative path, size, SHA-256, kind and a bounded
preview. The model gets :func:`render_manifest`'s compact text in its prompt instead of the files'
content; it reads the files with code when it needs more.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fleet_rlm.workspace.hashing import DigestCache, default_cache
from fleet_rlm.workspace.kinds import FileKind, detect_kind
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.previews import (
    HEAD_SAMPLE_BYTES,
    MAX_COLUMNS,
    JsonPreview,
    Preview,
    TablePreview,
    TextPreview,
    build_preview,
    read_sample,
)
from fleet_rlm.workspace.snapshot import changed_since as changed_since
from fleet_rlm.workspace.snapshot import snapshot as snapshot
from fleet_rlm.workspace.tree import SafeTree
from fleet_rlm.workspace.walk import WorkspaceFile, iter_files, tree_of

DEFAULT_PREVIEW_CHARS = 2000
DEFAULT_PREVIEW_ROWS = 5
DEFAULT_MAX_ENTRIES = 500
DEFAULT_RENDER_CHARS = 12_000
_TABLE_LINE_CHARS = 300
_CLOSING_RESERVE = 120
_INDENT = "  "


@dataclass(frozen=True)
class ManifestEntry:
    path: str
    """Relative to the workspace root, ``/``-separated, e.g. ``"files/sales.csv"``."""
    size: int
    mtime_ns: int
    sha256: str
    kind: FileKind
    preview: Preview | None
    """None for binary kinds and empty files."""


class Manifest(list[ManifestEntry]):
    """The entries, plus how many files were left out because of ``max_entries``."""

    def __init__(self, entries: Iterable[ManifestEntry] = (), left_out: int = 0) -> None:
        super().__init__(entries)
        self.left_out = left_out


def build_manifest(
    workspace: Workspace | Path | SafeTree,
    *,
    preview_chars: int = DEFAULT_PREVIEW_CHARS,
    preview_rows: int = DEFAULT_PREVIEW_ROWS,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    cache: DigestCache | None = None,
) -> Manifest:
    """Entries for the workspace's files, inputs (``files/``) first; at most ``max_entries``.

    Reads each file's head and tail for its kind and preview and hashes it by streaming, unless
    ``cache`` (default: the process-wide one) has seen this version of the file already.
    """
    if preview_chars < 1 or preview_rows < 0 or max_entries < 0:
        raise ValueError(
            f"preview_chars must be >= 1, preview_rows and max_entries >= 0 "
            f"(got {preview_chars}, {preview_rows}, {max_entries})"
        )
    digests = cache if cache is not None else default_cache
    entries: list[ManifestEntry] = []
    left_out = 0
    for found in iter_files(tree_of(workspace)):
        if len(entries) >= max_entries:
            left_out += 1
            continue
        entry = _entry(found, digests, preview_chars, preview_rows)
        if entry is not None:
            entries.append(entry)
    return Manifest(entries, left_out)


def _entry(file: WorkspaceFile, cache: DigestCache, preview_chars: int, preview_rows: int) -> ManifestEntry | None:
    def compute() -> ManifestEntry:
        head_bytes, tail_bytes = max(HEAD_SAMPLE_BYTES, preview_chars * 4), max(preview_chars * 4, 4096)
        sample = read_sample(file.open, head_bytes, tail_bytes)
        kind = detect_kind(file.rel, sample.head, sample.tail, head_is_whole_file=sample.whole)
        digest = cache.digest(file)
        preview = build_preview(kind, file.open, sample, digest, preview_chars=preview_chars, preview_rows=preview_rows)
        return ManifestEntry(file.rel, sample.size, file.mtime_ns, digest.sha256, kind, preview)

    try:
        return cache.remember(file, ("manifest entry", file.rel, preview_chars, preview_rows), compute)
    except OSError:  # vanished or unreadable while we looked: leave it out
        return None


def manifest_to_json(entries: Sequence[ManifestEntry]) -> dict[str, Any]:
    """``{"entries": [...], "left_out": n}``, JSON-ready, for events and the API.

    Each preview carries a ``type``: ``text``, ``table`` or ``json``.
    """
    return {
        "entries": [_entry_json(entry) for entry in entries],
        "left_out": getattr(entries, "left_out", 0),
    }


def _entry_json(entry: ManifestEntry) -> dict[str, Any]:
    preview: dict[str, Any] | None = None
    if entry.preview is not None:
        preview = {"type": _preview_type(entry.preview), **_lists(asdict(entry.preview))}
    return {
        "path": entry.path,
        "size": entry.size,
        "mtime_ns": entry.mtime_ns,
        "sha256": entry.sha256,
        "kind": entry.kind.value,
        "preview": preview,
    }


def _preview_type(preview: Preview) -> str:
    if isinstance(preview, TablePreview):
        return "table"
    if isinstance(preview, JsonPreview):
        return "json"
    return "text"


def _lists(data: dict[str, Any]) -> dict[str, Any]:
    def convert(value: Any) -> Any:
        return [convert(v) for v in value] if isinstance(value, tuple | list) else value

    return {key: convert(value) for key, value in data.items()}


def render_manifest(entries: Sequence[ManifestEntry], *, max_chars: int = DEFAULT_RENDER_CHARS) -> str:
    """The compact text the model sees, never longer than ``max_chars``.

    Each file gets a one-line summary (path, size, kind, shape, sha256 prefix) and, room
    permitting, its preview indented below. The room is spent in order: summaries of as many files
    as fit in half of it (so the model learns what exists), then previews for those files, then
    summaries of further files. A closing line counts the files not listed.
    """
    if not entries:
        return "(no files)"
    budget = max_chars - _CLOSING_RESERVE
    blocks = [_summary(entry) for entry in entries]
    used = listed = 0
    while listed < len(blocks) and used + len(blocks[listed]) + 2 <= budget // 2:
        used += len(blocks[listed]) + 2
        listed += 1
    for i in range(listed):
        full = _block(entries[i])
        if used + len(full) - len(blocks[i]) <= budget:
            used += len(full) - len(blocks[i])
            blocks[i] = full
    while listed < len(blocks) and used + len(blocks[listed]) + 2 <= budget:
        used += len(blocks[listed]) + 2
        listed += 1
    shown = blocks[:listed]
    left_out = len(entries) - listed + getattr(entries, "left_out", 0)
    if left_out:
        shown.append(f"[{left_out:,} more file(s) not listed here; list the workspace with code to see them all]")
    return "\n\n".join(shown)[:max_chars]


def _summary(entry: ManifestEntry) -> str:
    facts = [human_size(entry.size), entry.kind.value]
    preview = entry.preview
    if isinstance(preview, TextPreview):
        facts.append(_plural(preview.line_count, "line"))
    elif isinstance(preview, TablePreview):
        approx = "" if preview.row_count_exact else "~"
        facts.append(f"{approx}{_plural(preview.row_count, 'row')} x {_plural(preview.column_count, 'column')}")
    elif isinstance(preview, JsonPreview):
        facts.append(_json_shape(preview))
    facts.append(f"sha256 {entry.sha256[:12]}")
    return f"{entry.path}  ({', '.join(facts)})"


def _block(entry: ManifestEntry) -> str:
    preview = entry.preview
    if preview is None:
        body = ["(empty)"] if entry.size == 0 else []
    elif isinstance(preview, TablePreview):
        body = _table_lines(preview)
    elif isinstance(preview, JsonPreview):
        body = _json_lines(preview, entry.size)
    else:
        body = _text_lines(preview)
    return "\n".join([_summary(entry), *(_INDENT + line for line in body)])


def _text_lines(preview: TextPreview) -> list[str]:
    lines = preview.head.splitlines()
    if preview.omitted_bytes or preview.tail:
        lines.append(f"[... {preview.omitted_bytes:,} bytes omitted ...]")
        lines.extend(preview.tail.splitlines())
    return lines


def _table_lines(preview: TablePreview) -> list[str]:
    facts = "delimiter: " + ("tab" if preview.delimiter == "\t" else repr(preview.delimiter))
    if not preview.row_count_exact:
        facts += "; row count estimated from the line count"
    if preview.column_count > MAX_COLUMNS:
        facts += f"; first {MAX_COLUMNS} columns shown"
    rows = [preview.header, *preview.rows]
    return [facts, *(_cut(preview.delimiter.join(_one_line(cell) for cell in row), _TABLE_LINE_CHARS) for row in rows)]


def _one_line(cell: str) -> str:
    return cell.replace("\r", "\\r").replace("\n", "\\n")


def _json_lines(preview: JsonPreview, size: int) -> list[str]:
    lines: list[str] = []
    if preview.error:
        lines.append(f"not valid JSON: {preview.error}")
    if preview.keys:
        more = f" (first {len(preview.keys)})" if preview.length and preview.length > len(preview.keys) else ""
        lines.append(_cut("keys" + more + ": " + ", ".join(f'"{k}"' for k in preview.keys), _TABLE_LINE_CHARS))
    lines.extend(preview.head.splitlines())
    rest = size - len(preview.head.encode("utf-8", errors="surrogatepass"))
    if rest > 0:
        lines.append(f"[... {rest:,} more bytes ...]")
    return lines


def _json_shape(preview: JsonPreview) -> str:
    if preview.top_level == "object" and preview.length is not None:
        return f"object with {_plural(preview.length, 'key')}"
    if preview.top_level == "array" and preview.length is not None:
        return f"array of {_plural(preview.length, 'item')}"
    if preview.error:
        return "invalid JSON"
    return preview.top_level if preview.parsed else f"{preview.top_level}, too large to parse"


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def _cut(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


def human_size(size: int) -> str:
    """``512 B``, ``1.5 KiB``, ``48.0 MiB``, ``2.1 GiB``."""
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"
