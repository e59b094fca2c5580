"""Bounded previews of a file's content, built from its first and last bytes only.

Whatever the file's size, a preview reads at most :data:`HEAD_SAMPLE_BYTES` from the start and a
few KiB from the end (plus, for small CSV and JSON files, one streaming pass to count rows or
parse). The whole-file facts a preview needs (line count) come from the hashing pass.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from fleet_rlm.workspace.hashing import FileDigest
from fleet_rlm.workspace.kinds import TEXT_KINDS, FileKind, decode_head, decode_tail

HEAD_SAMPLE_BYTES = 64 * 1024
EXACT_ROW_COUNT_BYTES = 4 * 1024 * 1024
"""CSV/TSV files up to this size get their records counted exactly (a streaming csv parse)."""
JSON_PARSE_BYTES = 2 * 1024 * 1024
"""JSON files up to this size are parsed for their top-level shape."""
MAX_COLUMNS = 40
Opener = Callable[[], BinaryIO]
"""Opens the file being previewed (safely: see :mod:`fleet_rlm.workspace.tree`)."""
MAX_CELL_CHARS = 60
MAX_KEYS = 40
_SNAP_CHARS = 200
"""A cut point moves to a line boundary if one lies within this many characters."""


@dataclass(frozen=True)
class FileSample:
    head: bytes
    tail: bytes
    """The last bytes, not overlapping ``head``; empty when ``head`` is the whole file."""
    size: int

    @property
    def whole(self) -> bool:
        return not self.tail and len(self.head) == self.size


def read_sample(opener: Opener, head_bytes: int, tail_bytes: int) -> FileSample:
    """The first ``head_bytes`` and last ``tail_bytes`` of the file (two reads, no more)."""
    with opener() as f:
        head = f.read(head_bytes)
        size = f.seek(0, io.SEEK_END)
        if size <= len(head):
            return FileSample(head, b"", len(head))
        tail_start = max(len(head), size - tail_bytes)
        f.seek(tail_start)
        tail = f.read(tail_bytes)
    if tail_start == len(head):  # contiguous: we have read it all
        return FileSample(head + tail, b"", len(head) + len(tail))
    return FileSample(head, tail, size)


@dataclass(frozen=True)
class TextPreview:
    head: str
    tail: str
    """Empty when ``head`` is the whole file."""
    omitted_bytes: int
    line_count: int


@dataclass(frozen=True)
class TablePreview:
    delimiter: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    """The first records (cells cut to :data:`MAX_CELL_CHARS`, at most :data:`MAX_COLUMNS`)."""
    column_count: int
    row_count: int
    """Data records, header excluded."""
    row_count_exact: bool
    """False when the count is the file's line count minus one (quoted newlines would make it off)."""


@dataclass(frozen=True)
class JsonPreview:
    top_level: str
    """``object``, ``array``, ``string``, ``number``, ``boolean``, ``null``, or ``unknown``."""
    length: int | None
    """Keys of an object or elements of an array; None when not parsed."""
    keys: tuple[str, ...]
    parsed: bool
    """False when too large to parse cheaply (then ``top_level`` is read from the first character)."""
    error: str | None
    """Why the file is not valid JSON, if it was parsed and is not."""
    head: str


Preview = TextPreview | TablePreview | JsonPreview


def build_preview(
    kind: FileKind,
    opener: Opener,
    sample: FileSample,
    digest: FileDigest,
    *,
    preview_chars: int,
    preview_rows: int,
) -> Preview | None:
    """The preview for a file of ``kind``; None for binary kinds and empty files."""
    if kind not in TEXT_KINDS or sample.size == 0:
        return None
    if kind in (FileKind.CSV, FileKind.TSV):
        table = table_preview(kind, opener, sample, digest, preview_rows=preview_rows)
        if table is not None:
            return table
    if kind is FileKind.JSON:
        return json_preview(opener, sample, head_chars=max(preview_chars // 4, 1))
    return text_preview(sample, digest, preview_chars=preview_chars)


def text_preview(sample: FileSample, digest: FileDigest, *, preview_chars: int) -> TextPreview:
    head_chars = max(preview_chars * 3 // 4, 1)
    tail_chars = max(preview_chars - head_chars, 0)
    line_count = _line_count(sample, digest)
    if sample.whole:
        text = decode_head(sample.head, final=True) or ""
        if len(text) <= preview_chars:
            return TextPreview(text, "", 0, line_count)
        head, tail = _snap_head(text[:head_chars]), _snap_tail(text[len(text) - tail_chars :] if tail_chars else "")
        return TextPreview(head, tail, _utf8_len(text) - _utf8_len(head) - _utf8_len(tail), line_count)
    head = _snap_head((decode_head(sample.head, final=False) or "")[:head_chars])
    tail_text = decode_tail(sample.tail) or ""
    tail = _snap_tail(tail_text[len(tail_text) - tail_chars :] if tail_chars else "")
    bom = 3 if sample.head.startswith(b"\xef\xbb\xbf") else 0
    return TextPreview(head, tail, sample.size - bom - _utf8_len(head) - _utf8_len(tail), line_count)


def table_preview(
    kind: FileKind, opener: Opener, sample: FileSample, digest: FileDigest, *, preview_rows: int
) -> TablePreview | None:
    """Header, first records and counts; None when the sample does not parse as delimited text."""
    text = decode_head(sample.head, final=sample.whole)
    if text is None:
        return None
    if not sample.whole:  # drop the record cut in half by the sample's end
        text = text[: text.rfind("\n") + 1]
    delimiter = "\t" if kind is FileKind.TSV else _guess_delimiter(text)
    try:
        records = _records(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
        header = next(records, [])
        first_rows = list(itertools.islice(records, preview_rows))
        row_count: int | None = len(first_rows) + sum(1 for _ in records) if sample.whole else None
    except csv.Error:
        return None
    if not header:
        return None
    if row_count is None and sample.size <= EXACT_ROW_COUNT_BYTES:
        row_count = _count_records(opener, delimiter)
    exact = row_count is not None
    if row_count is None:
        row_count = max(_line_count(sample, digest) - 1, 0)
    return TablePreview(
        delimiter=delimiter,
        header=_cells(header),
        rows=tuple(_cells(row) for row in first_rows),
        column_count=len(header),
        row_count=row_count,
        row_count_exact=exact,
    )


def json_preview(opener: Opener, sample: FileSample, *, head_chars: int) -> JsonPreview:
    head_text = decode_head(sample.head, final=sample.whole) or ""
    head = head_text[:head_chars]
    if sample.size > JSON_PARSE_BYTES:
        return JsonPreview(_top_level_from_text(head_text), None, (), False, None, head)
    text = head_text if sample.whole else _read_text(opener, JSON_PARSE_BYTES)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return JsonPreview(_top_level_from_text(head_text), None, (), True, _short(str(exc), 200), head)
    if isinstance(value, dict):
        keys = tuple(_short(str(k), MAX_CELL_CHARS) for k in itertools.islice(value, MAX_KEYS))
        return JsonPreview("object", len(value), keys, True, None, head)
    if isinstance(value, list):
        return JsonPreview("array", len(value), (), True, None, head)
    return JsonPreview(_json_type(value), None, (), True, None, head)


def _records(reader: Iterable[list[str]]) -> Iterator[list[str]]:
    """Records that are not blank lines (pandas and most tools skip those too)."""
    return iter(row for row in reader if row)


def _read_text(opener: Opener, limit: int) -> str:
    with opener() as f:
        return f.read(limit).decode("utf-8-sig", errors="replace")


def _count_records(opener: Opener, delimiter: str) -> int | None:
    try:
        with opener() as raw, io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as f:
            return max(sum(1 for _ in _records(csv.reader(f, delimiter=delimiter))) - 1, 0)
    except (csv.Error, UnicodeDecodeError, OSError):
        return None


def _guess_delimiter(text: str) -> str:
    first_line = text.split("\n", 1)[0]
    counts = {d: first_line.count(d) for d in (",", ";", "\t", "|")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] > counts[","] else ","


def _cells(row: list[str]) -> tuple[str, ...]:
    return tuple(_short(cell, MAX_CELL_CHARS) for cell in row[:MAX_COLUMNS])


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _line_count(sample: FileSample, digest: FileDigest) -> int:
    last = (sample.tail or sample.head)[-1:]
    return digest.newlines + (1 if last and last != b"\n" else 0)


def _snap_head(head: str) -> str:
    cut = head.rfind("\n", max(len(head) - _SNAP_CHARS, 0))
    return head[: cut + 1] if cut > 0 else head


def _snap_tail(tail: str) -> str:
    cut = tail.find("\n", 0, _SNAP_CHARS)
    return tail[cut + 1 :] if 0 <= cut < len(tail) - 1 else tail


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogatepass"))


def _top_level_from_text(text: str) -> str:
    first = text.lstrip()[:1]
    return {"{": "object", "[": "array", '"': "string", "t": "boolean", "f": "boolean", "n": "null"}.get(
        first, "number" if first[:1].isdigit() or first == "-" else "unknown"
    )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "string"
