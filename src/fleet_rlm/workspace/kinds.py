"""What kind of file something is: by extension first, then by sniffing its first and last bytes.

A file whose extension promises text but whose bytes hold a NUL or are not UTF-8 is ``binary``:
the preview would be garbage. A file with an unknown extension is recognised by its magic bytes
(PDF, Parquet, images, archives, SQLite) or, failing that, is ``text`` if it decodes.
"""

from __future__ import annotations

import codecs
from enum import StrEnum
from pathlib import PurePosixPath


class FileKind(StrEnum):
    CSV = "csv"
    TSV = "tsv"
    JSON = "json"
    JSONL = "jsonl"
    TEXT = "text"
    MARKDOWN = "markdown"
    CODE = "code"
    PARQUET = "parquet"
    PDF = "pdf"
    IMAGE = "image"
    SPREADSHEET = "spreadsheet"
    ARCHIVE = "archive"
    SQLITE = "sqlite"
    BINARY = "binary"


TEXT_KINDS = frozenset(
    {FileKind.CSV, FileKind.TSV, FileKind.JSON, FileKind.JSONL, FileKind.TEXT, FileKind.MARKDOWN, FileKind.CODE}
)

_CODE_EXTENSIONS = (
    "py pyi js mjs cjs ts tsx jsx java kt kts scala go rs rb php c h cc cpp cxx hpp hh cs swift m mm r jl lua pl "
    "pm sh bash zsh fish ps1 sql html htm css scss less xml xsl yaml yml toml ini cfg conf properties proto graphql "
    "tf hcl dockerfile makefile cmake gradle vue svelte dart ex exs erl hs ml elm clj lisp scm vim tex bib"
)
_EXTENSIONS: dict[str, FileKind] = {
    **dict.fromkeys(_CODE_EXTENSIONS.split(), FileKind.CODE),
    "csv": FileKind.CSV,
    "tsv": FileKind.TSV,
    "tab": FileKind.TSV,
    "json": FileKind.JSON,
    "geojson": FileKind.JSON,
    "ipynb": FileKind.JSON,
    "jsonl": FileKind.JSONL,
    "ndjson": FileKind.JSONL,
    "txt": FileKind.TEXT,
    "text": FileKind.TEXT,
    "log": FileKind.TEXT,
    "rst": FileKind.TEXT,
    "srt": FileKind.TEXT,
    "md": FileKind.MARKDOWN,
    "markdown": FileKind.MARKDOWN,
    "parquet": FileKind.PARQUET,
    "pq": FileKind.PARQUET,
    "pdf": FileKind.PDF,
    **dict.fromkeys(
        ["png", "jpg", "jpeg", "gif", "bmp", "webp", "tif", "tiff", "ico", "heic", "avif", "svg"], FileKind.IMAGE
    ),
    **dict.fromkeys(["xlsx", "xlsm", "xls", "ods"], FileKind.SPREADSHEET),
    **dict.fromkeys(["zip", "gz", "tgz", "bz2", "xz", "zst", "7z", "tar", "rar"], FileKind.ARCHIVE),
    **dict.fromkeys(["sqlite", "sqlite3", "db"], FileKind.SQLITE),
}
_NAMES: dict[str, FileKind] = {"dockerfile": FileKind.CODE, "makefile": FileKind.CODE, "readme": FileKind.TEXT}
_MAGIC: tuple[tuple[bytes, FileKind], ...] = (
    (b"%PDF-", FileKind.PDF),
    (b"PAR1", FileKind.PARQUET),
    (b"\x89PNG\r\n\x1a\n", FileKind.IMAGE),
    (b"\xff\xd8\xff", FileKind.IMAGE),
    (b"GIF87a", FileKind.IMAGE),
    (b"GIF89a", FileKind.IMAGE),
    (b"PK\x03\x04", FileKind.ARCHIVE),
    (b"\x1f\x8b", FileKind.ARCHIVE),
    (b"BZh", FileKind.ARCHIVE),
    (b"\xfd7zXZ\x00", FileKind.ARCHIVE),
    (b"\x28\xb5\x2f\xfd", FileKind.ARCHIVE),
    (b"SQLite format 3\x00", FileKind.SQLITE),
)


def kind_from_name(rel: str) -> FileKind | None:
    """The kind a file's name promises, or None when the name says nothing."""
    name = PurePosixPath(rel).name.lower()
    suffix = name.rsplit(".", 1)[1] if "." in name.lstrip(".") else ""
    return _EXTENSIONS.get(suffix) or _NAMES.get(name)


def looks_like_text(head: bytes, tail: bytes = b"", *, head_is_whole_file: bool = False) -> bool:
    """Whether the sampled bytes are UTF-8 text: no NUL byte and decodable.

    ``head`` may end, and ``tail`` may start, in the middle of a multi-byte character; that is
    tolerated unless ``head_is_whole_file``.
    """
    if b"\x00" in head or b"\x00" in tail:
        return False
    return decode_head(head, final=head_is_whole_file) is not None and decode_tail(tail) is not None


def decode_head(data: bytes, *, final: bool) -> str | None:
    """``data`` as UTF-8 (a BOM dropped), keeping back a character cut at the end unless ``final``."""
    try:
        return codecs.getincrementaldecoder("utf-8-sig")().decode(data, final=final)
    except UnicodeDecodeError:
        return None


def decode_tail(data: bytes) -> str | None:
    """``data`` as UTF-8, after dropping the continuation bytes of a character cut at the start."""
    start = 0
    while start < min(3, len(data)) and data[start] & 0b1100_0000 == 0b1000_0000:
        start += 1
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError:
        return None


def detect_kind(rel: str, head: bytes, tail: bytes = b"", *, head_is_whole_file: bool = False) -> FileKind:
    """The kind of the file at ``rel`` whose first bytes are ``head`` and last bytes ``tail``."""
    named = kind_from_name(rel)
    if named is not None and named not in TEXT_KINDS:
        return named
    if named is None:
        for magic, kind in _MAGIC:
            if head.startswith(magic):
                return kind
    if not looks_like_text(head, tail, head_is_whole_file=head_is_whole_file):
        return FileKind.BINARY
    return named or FileKind.TEXT
