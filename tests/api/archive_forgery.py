"""Forged session archives: a real export rewritten in place, field by field."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from typing import Any

Manifest = dict[str, Any]
EventLines = list[dict[str, Any]]


def rewrite(
    archive: bytes,
    manifest: Callable[[Manifest], object] | None = None,
    events: Callable[[EventLines], object] | None = None,
    event_bytes: Callable[[bytes], bytes] | None = None,
) -> bytes:
    """The archive with its manifest and turn 1's events changed in place by the callables given
    (``event_bytes``: the events file as bytes, for what ``json.dumps`` would not write)."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as source,
        tarfile.open(fileobj=out, mode="w:gz") as tar,
    ):
        for member in source.getmembers():
            data = source.extractfile(member).read() if member.isfile() else b""  # type: ignore[union-attr]
            if member.name == "manifest.json" and manifest is not None:
                value = json.loads(data)
                manifest(value)
                data = json.dumps(value).encode()
            elif member.name == "events/1.jsonl" and events is not None:
                lines = [json.loads(line) for line in data.splitlines() if line.strip()]
                events(lines)
                data = "".join(json.dumps(line) + "\n" for line in lines).encode()
            if member.name == "events/1.jsonl" and event_bytes is not None:
                data = event_bytes(data)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return out.getvalue()
