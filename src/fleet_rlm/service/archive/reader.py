"""Reading an untrusted session archive with bounded memory, disk and work.

The archive is read once, front to back, as a stream: the packed bytes, the unpacked bytes (tar
headers and skipped data included), the entries and each file are counted against the import limits
as they pass, so a bomb is refused as soon as it crosses one. No single read exceeds
:data:`MAX_READ` (tarfile reads extended headers whole: a huge one is refused, not buffered), the
stream never seeks backwards, and JSON is parsed a bounded record at a time, after its number of
values (what it would cost in memory) is checked.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import math
import re
import tarfile
from dataclasses import dataclass
from typing import IO, Any, cast

from fleet_rlm.config import ServerSettings
from fleet_rlm.store import Invalid

MIB = 1024 * 1024
MAX_MANIFEST_BYTES = 8 * MIB
MAX_MANIFEST_VALUES = 500_000
MAX_EVENT_LINE_BYTES = 8 * MIB
MAX_EVENT_VALUES = 100_000
MAX_READ = MAX_MANIFEST_BYTES + 1
SKIP_CHUNK = MIB
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_STRUCTURE = (b",", b":", b"[", b"{")


class BadArchive(Invalid):
    code = "invalid_archive"


class ArchiveTooLarge(Invalid):
    code = "archive_too_large"


@dataclass(frozen=True)
class ImportLimits:
    packed: int
    unpacked: int
    file: int
    entries: int

    @classmethod
    def of(cls, server: ServerSettings) -> ImportLimits:
        return cls(
            packed=server.import_limit_mb * MIB,
            unpacked=server.import_unpacked_limit_mb * MIB,
            file=server.import_file_limit_mb * MIB,
            entries=server.import_max_entries,
        )


class _Packed:
    """The archive as sent, counted against the packed limit (with the sniffed head put back)."""

    def __init__(self, source: IO[bytes], head: bytes, limit: int) -> None:
        self._source = source
        self._head = head
        self._read = len(head)
        self._limit = limit

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (a chunk when negative: the decompressors only ever ask for a size)."""
        size = size if size >= 0 else SKIP_CHUNK
        if self._head:
            data, self._head = self._head[:size], self._head[size:]
            return data
        data = self._source.read(size)
        self._read += len(data)
        if self._read > self._limit:
            raise ArchiveTooLarge(
                f"the archive is larger than the limit of {self._limit // MIB} MiB (FLEET_IMPORT_LIMIT_MB)"
            )
        return data


class Unpacked:
    """The unpacked tar stream as tarfile reads it: forward only, every byte counted."""

    def __init__(self, inner: IO[bytes] | gzip.GzipFile, limit: int) -> None:
        self._inner = inner
        self._limit = limit
        self._position = 0

    def _count(self, size: int) -> None:
        self._position += size
        if self._position > self._limit:
            raise ArchiveTooLarge(
                f"the archive unpacks to more than the limit of {self._limit // MIB} MiB (FLEET_IMPORT_UNPACKED_LIMIT_MB)"
            )

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > MAX_READ:
            raise BadArchive("the archive has an implausibly large header or record")
        chunks: list[bytes] = []
        wanted = size
        while wanted > 0:
            chunk: bytes = self._inner.read(wanted)
            if not chunk:
                break
            self._count(len(chunk))
            chunks.append(chunk)
            wanted -= len(chunk)
        return b"".join(chunks)

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = 0) -> int:
        target = offset if whence == 0 else self._position + offset
        if whence not in (0, 1) or target < self._position:
            raise BadArchive("the archive's entries overlap (it is not a plain sequential tar)")
        while self._position < target:
            if not self.read(min(SKIP_CHUNK, target - self._position)):
                break
        return self._position


def open_unpacked(source: IO[bytes], limits: ImportLimits) -> Unpacked:
    """gzip, bzip2, xz or plain tar, by its first bytes."""
    head = source.read(6)
    packed = cast("IO[bytes]", _Packed(source, head, limits.packed))
    inner: IO[bytes] | gzip.GzipFile
    if head.startswith(b"\x1f\x8b"):
        inner = gzip.GzipFile(fileobj=packed, mode="rb")
    elif head.startswith(b"BZh"):
        inner = bz2.BZ2File(packed, mode="rb")
    elif head.startswith(b"\xfd7zXZ\x00"):
        inner = lzma.LZMAFile(packed, mode="rb")  # noqa: SIM115
    else:
        inner = packed
    return Unpacked(inner, limits.unpacked)


def open_tar(source: IO[bytes], limits: ImportLimits) -> tarfile.TarFile:
    """A tar reader over ``source`` (``mode="r:"``: plain reads of the bounded stream)."""
    return tarfile.TarFile(fileobj=cast("IO[bytes]", open_unpacked(source, limits)), mode="r")


def parse_json(data: bytes, max_values: int, where: str) -> Any:
    """``json.loads`` after checking the number of values (each costs memory however short its text)."""
    skeleton = _STRING.sub(b'""', data)
    if sum(skeleton.count(mark) for mark in _STRUCTURE) > max_values:
        raise BadArchive(f"{where} holds more than {max_values} JSON values")
    try:
        value = json.loads(data, parse_constant=_not_json, parse_float=_finite)
    except (ValueError, RecursionError) as exc:
        raise BadArchive(f"{where} is not valid JSON: {str(exc)[:200]}") from exc
    if _holds_nul(value):
        raise BadArchive(f"{where} holds a NUL character (U+0000), which Fleet does not store")
    return value


def _not_json(constant: str) -> float:
    """``json`` reads NaN and Infinity, which JSON has not (RFC 8259) and neither database stores."""
    raise ValueError(f"{constant} is not a JSON number")


def _finite(text: str) -> float:
    """A JSON number as a float, one too large for a float (``1e999``) refused rather than made infinite."""
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {text[:40]} is too large for a float")
    return number


def _holds_nul(value: Any) -> bool:
    """Any key or string in the JSON value holds U+0000 (PostgreSQL cannot store it; SQLite could)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def is_plain_file(member: tarfile.TarInfo) -> bool:
    """A regular file (not sparse, not a link or device): the only kind an archive's data is in."""
    return member.type in (tarfile.REGTYPE, tarfile.AREGTYPE) and member.sparse is None


READ_ERRORS: tuple[type[BaseException], ...] = (tarfile.TarError, OSError, EOFError, lzma.LZMAError, ValueError)
"""What reading a corrupt archive raises (besides BadArchive and ArchiveTooLarge)."""
