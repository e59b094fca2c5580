"""Hostile session archives, tiny when packed: gzip members concatenated (one stream to a reader),
so gigabytes of zeros cost a few kilobytes and no time to build."""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import tarfile
from typing import Any

MIB = 1024 * 1024
BLOCK = 512


@functools.cache
def _zeros_gz(size: int) -> bytes:
    return gzip.compress(b"\0" * size, compresslevel=9)


@functools.cache
def _spaces_gz() -> bytes:
    return gzip.compress(b" " * MIB, compresslevel=9)


def _padding(size: int) -> bytes:
    return b"\0" * (-size % BLOCK)


def _header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.type = kind
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def _member(name: str, data: bytes) -> bytes:
    return gzip.compress(_header(name, len(data)) + data + _padding(len(data)))


def _end() -> bytes:
    return gzip.compress(b"\0" * (2 * BLOCK))


def _zeros(megabytes: int) -> bytes:
    return _zeros_gz(MIB) * megabytes


def manifest(turns: int = 1, files: list[dict[str, Any]] | None = None) -> bytes:
    body = {
        "format": "fleet-session-archive",
        "version": 1,
        "session": {"name": None, "title": "bomb", "mode": None, "settings": {}},
        "turns": [{"position": n, "message": "m", "status": "completed", "answer": "a"} for n in range(1, turns + 1)],
        "files": files or [],
    }
    return json.dumps(body).encode()


def blob_bomb(members: int, megabytes_each: int) -> bytes:
    """``members`` blobs of zeros, each listed in the manifest with its true size and digest."""
    size = megabytes_each * MIB
    digest = hashlib.sha256(b"\0" * size).hexdigest()
    files = [
        {"path": f"files/z{n}", "size": size, "sha256": digest, "media_type": "x/y", "origin": "upload"}
        for n in range(members)
    ]
    parts = [_member("manifest.json", manifest(0, files))]
    for _ in range(members):
        parts += [gzip.compress(_header(f"blobs/{digest}", size)), _zeros(megabytes_each)]
    return b"".join([*parts, _end()])


def event_line_bomb(megabytes: int) -> bytes:
    """One turn whose events file is a single line of ``megabytes`` MiB (once read whole)."""
    size = megabytes * MIB
    return b"".join(
        [
            _member("manifest.json", manifest()),
            gzip.compress(_header("events/1.jsonl", size)),
            _spaces_gz() * megabytes,
            _end(),
        ]
    )


def entries_bomb(entries: int) -> bytes:
    headers = b"".join(_header(f"junk/{n}", 0) for n in range(entries))
    return b"".join([_member("manifest.json", manifest()), gzip.compress(headers), _end()])


def header_bomb(megabytes: int) -> bytes:
    """A pax extended header of ``megabytes`` MiB, which tarfile reads whole before the next entry."""
    return b"".join(
        [
            _member("manifest.json", manifest()),
            gzip.compress(_header("././@PaxHeader", megabytes * MIB, tarfile.XHDTYPE)),
            _zeros(megabytes),
            _end(),
        ]
    )


def manifest_bomb(megabytes: int) -> bytes:
    """A manifest of millions of empty objects: short text, costly once parsed."""
    count = megabytes * MIB // 3
    data = b'{"format":"fleet-session-archive","version":1,"x":[' + b"{}," * count + b"{}]}"
    return _member("manifest.json", data) + _end()


def unlisted_blob(megabytes: int) -> bytes:
    """A valid manifest that lists no file, then a big blob it never mentions."""
    digest = hashlib.sha256(b"\0" * (megabytes * MIB)).hexdigest()
    return b"".join(
        [
            _member("manifest.json", manifest()),
            gzip.compress(_header(f"blobs/{digest}", megabytes * MIB)),
            _zeros(megabytes),
            _end(),
        ]
    )


def valid_tar_gz(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()
