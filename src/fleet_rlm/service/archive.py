"""Portable session archives: one ``.tar.gz`` with a session's history, events and file bytes.

Layout: ``manifest.json`` (format, version, the session, its finished turns and its files),
``events/<n>.jsonl`` (turn ``n``'s events, by position) and ``blobs/<sha256>``. Import never
extracts to disk paths from the archive: it reads only those names, checks every blob's size and
digest against the manifest, and restores the session under new ids in one transaction.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fleet_rlm.engine.events import Event, new_id
from fleet_rlm.service.files import stored_path
from fleet_rlm.store import BlobStore, FileRecord, Invalid, SessionRecord, Store, TurnRecord
from fleet_rlm.store.store import SESSION_ID_PREFIX
from fleet_rlm.store.tables import FINAL_TURN_STATUSES

FORMAT = "fleet-session-archive"
VERSION = 1
_BLOB = re.compile(r"blobs/([0-9a-f]{64})")
_EVENTS = re.compile(r"events/(\d+)\.jsonl")
MAX_MANIFEST_BYTES = 64 * 1024 * 1024


class BadArchive(Invalid):
    code = "invalid_archive"


def _time(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _parse_time(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    parsed = dt.datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(dt.datetime.now(dt.UTC).timestamp())
    tar.addfile(info, io.BytesIO(data))


async def export_session(store: Store, blobs: BlobStore, ref: str, destination: IO[bytes]) -> SessionRecord:
    """Write the session's archive to ``destination`` (finished turns only)."""
    session = await store.get_session(ref)
    turns = await store.history(session.id)
    files = await store.list_files(session.id)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": dt.datetime.now(dt.UTC).isoformat(),
        "session": {
            "name": session.name,
            "title": session.title,
            "mode": session.mode,
            "settings": session.settings,
            "created_at": _time(session.created_at),
            "updated_at": _time(session.updated_at),
        },
        "turns": [
            {
                "position": t.position,
                "message": t.message,
                "context_paths": t.context_paths,
                "options": t.options,
                "status": t.status,
                "answer": t.answer,
                "error": t.error,
                "usage": t.usage,
                "artifacts": t.artifacts,
                "created_at": _time(t.created_at),
                "started_at": _time(t.started_at),
                "finished_at": _time(t.finished_at),
            }
            for t in turns
        ],
        "files": [
            {"path": f.path, "size": f.size, "sha256": f.sha256, "media_type": f.media_type, "origin": f.origin}
            for f in files
        ],
    }
    events = {turn.position: await store.events_after(turn.id, 0, limit=10_000_000) for turn in turns}
    blob_paths = {sha: blobs.path(session.id, sha) for sha in sorted({f.sha256 for f in files})}
    await asyncio.to_thread(_write_archive, destination, manifest, events, blob_paths)
    return session


def _write_archive(
    destination: IO[bytes], manifest: dict[str, Any], events: dict[int, list[Event]], blob_paths: dict[str, Path]
) -> None:
    with tarfile.open(fileobj=destination, mode="w:gz") as tar:
        _add_bytes(tar, "manifest.json", json.dumps(manifest, indent=1).encode())
        for position, stream in events.items():
            lines = "".join(json.dumps(e.to_dict(), separators=(",", ":")) + "\n" for e in stream)
            _add_bytes(tar, f"events/{position}.jsonl", lines.encode())
        for sha, path in blob_paths.items():
            tar.add(path, arcname=f"blobs/{sha}", recursive=False)


@dataclass
class _Read:
    manifest: dict[str, Any]
    events: dict[int, list[dict[str, Any]]]
    blobs: dict[str, tuple[str, int]]  # sha -> (stored sha, size)


def _read_archive(source: IO[bytes], blobs: BlobStore, session_id: str) -> _Read:
    manifest: dict[str, Any] | None = None
    events: dict[int, list[dict[str, Any]]] = {}
    stored: dict[str, tuple[str, int]] = {}
    try:
        with tarfile.open(fileobj=source, mode="r:*") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                handle = tar.extractfile(member)
                if handle is None:
                    continue
                if member.name == "manifest.json":
                    if member.size > MAX_MANIFEST_BYTES:
                        raise BadArchive("the archive's manifest.json is implausibly large")
                    manifest = json.loads(handle.read())
                elif match := _EVENTS.fullmatch(member.name):
                    events[int(match[1])] = [json.loads(line) for line in handle.read().splitlines() if line.strip()]
                elif match := _BLOB.fullmatch(member.name):
                    stored[match[1]] = blobs.put_stream(session_id, handle)
    except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
        raise BadArchive(f"not a readable session archive: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BadArchive("not a Fleet session archive (manifest.json is missing or of another format)")
    if manifest.get("version") != VERSION:
        raise BadArchive(f"session archive version {manifest.get('version')!r} is not supported (expected {VERSION})")
    return _Read(manifest, events, stored)


async def import_session(
    store: Store, blobs: BlobStore, source: IO[bytes], *, name: str | None = None
) -> SessionRecord:
    """Restore an archive as a new session (new ids). Its name is ``name``, else the archived one."""
    session_id = new_id(SESSION_ID_PREFIX)
    try:
        read = await asyncio.to_thread(_read_archive, source, blobs, session_id)
        session = _session(read.manifest, session_id, name)
        turns, events = _turns(read)
        files = _files(read)
        return await store.restore_session(session, turns, events, files)
    except BaseException:
        blobs.remove_session(session_id)
        raise


def _session(manifest: dict[str, Any], session_id: str, name: str | None) -> SessionRecord:
    raw = manifest.get("session") or {}
    now = dt.datetime.now(dt.UTC)
    return SessionRecord(
        id=session_id,
        name=name if name is not None else raw.get("name"),
        title=raw.get("title"),
        mode=raw.get("mode"),
        settings=dict(raw.get("settings") or {}),
        created_at=_parse_time(raw.get("created_at")) or now,
        updated_at=now,
    )


def _turns(read: _Read) -> tuple[list[TurnRecord], list[Event]]:
    turns: list[TurnRecord] = []
    events: list[Event] = []
    for raw in read.manifest.get("turns") or []:
        position = int(raw["position"])
        if raw.get("status") not in FINAL_TURN_STATUSES:
            raise BadArchive(f"turn {position} has status {raw.get('status')!r}, not a finished one")
        turn_id = new_id("turn")
        turns.append(
            TurnRecord(
                id=turn_id,
                session_id="",
                position=position,
                message=str(raw["message"]),
                status=str(raw["status"]),
                context_paths=list(raw.get("context_paths") or []),
                options=dict(raw.get("options") or {}),
                answer=raw.get("answer"),
                error=raw.get("error"),
                usage=dict(raw.get("usage") or {}),
                artifacts=list(raw.get("artifacts") or []),
                created_at=_parse_time(raw.get("created_at")),
                started_at=_parse_time(raw.get("started_at")),
                finished_at=_parse_time(raw.get("finished_at")),
            )
        )
        for event in read.events.get(position, []):
            events.append(Event.from_dict({**event, "turn_id": turn_id}))
    return turns, events


def _files(read: _Read) -> list[FileRecord]:
    files: list[FileRecord] = []
    for raw in read.manifest.get("files") or []:
        sha, size = str(raw["sha256"]), int(raw["size"])
        if read.blobs.get(sha) != (sha, size):
            raise BadArchive(f"the bytes of {raw['path']!r} are missing from the archive or do not match its digest")
        path = stored_path(str(raw["path"]))
        files.append(FileRecord(path, size, sha, str(raw["media_type"]), str(raw["origin"])))
    return files
