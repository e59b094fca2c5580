"""Portable session archives: one ``.tar.gz`` with a session's history, events and file bytes.

Layout: ``manifest.json`` (format, version, the session, its finished turns, its files and the
memory entries its turns proposed, pending or approved), ``events/<n>.jsonl`` (turn ``n``'s events,
by position) and ``blobs/<sha256>``. Version 2 added ``memory``; version 1 archives still import.
Imported memory entries wait for review again, whatever they were (an archive is outside data). Import never
extracts to disk paths from the archive: it reads only those names, as a bounded stream
(:mod:`~fleet_rlm.service.archive.reader`), checks every blob's size and digest and every event
against the manifest, holds every field to its rule (:mod:`~fleet_rlm.service.archive.schema`, one
schema for the manifest and the events) and the archived settings to this server's, and restores
the session under new ids in one transaction (events inserted a batch at a time from a spool, never
all in memory). A refused archive stores nothing.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import re
import tarfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fleet_rlm.config import Ceilings, MemorySettings, ServerSettings
from fleet_rlm.protocol.events import Event, new_id
from fleet_rlm.protocol.ids import new_session_id
from fleet_rlm.service.archive.reader import (
    MAX_EVENT_LINE_BYTES,
    MAX_EVENT_VALUES,
    MAX_MANIFEST_BYTES,
    MAX_MANIFEST_VALUES,
    MIB,
    READ_ERRORS,
    ArchiveTooLarge,
    BadArchive,
    ImportLimits,
    is_plain_file,
    open_tar,
    parse_json,
)
from fleet_rlm.service.archive.schema import (
    MAX_MEMORY_ENTRIES,
    MEMORY_TEXT_LIMIT,
    ArchivedEvent,
    ArchivedSession,
    ArchiveManifest,
    validated,
)
from fleet_rlm.service.files import SessionFiles, media_type_of
from fleet_rlm.store import BlobStore, FileRecord, Invalid, MemoryRecord, SessionRecord, Store, TurnRecord
from fleet_rlm.store.session_settings import check_session_settings

FORMAT = "fleet-session-archive"
VERSION = 2
READABLE_VERSIONS = (1, 2)
_BLOB = re.compile(r"blobs/([0-9a-f]{64})")
_EVENTS = re.compile(r"events/(\d{1,9})\.jsonl")
EVENT_BATCH = 500
EVENT_BATCH_BYTES = 4 * 1024 * 1024


def _time(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(dt.datetime.now(dt.UTC).timestamp())
    tar.addfile(info, io.BytesIO(data))


async def export_session(store: Store, session_files: SessionFiles, ref: str, destination: IO[bytes]) -> SessionRecord:
    """Write the session's archive to ``destination`` (finished turns only)."""
    session = await store.get_session(ref)
    turns = await store.history(session.id)
    files = await store.list_files(session.id)
    memories = [
        m for m in await store.list_memories(session_id=session.id, limit=MAX_MEMORY_ENTRIES) if m.status != "rejected"
    ]
    positions = {t.id: t.position for t in turns}
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
                "answer_source": t.answer_source,
                "unverified_reason": t.unverified_reason,
                "error": t.error,
                "usage": t.usage,
                "artifacts": t.artifacts,
                "evidence": t.evidence,
                "program_version": t.program_version,
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
        "memory": [
            {
                "text": m.text,
                "why": m.why,
                "status": m.status,
                "turn_position": positions.get(m.turn_id or ""),
                "created_at": _time(m.created_at),
            }
            for m in memories
        ],
    }
    events = {turn.position: await store.events_after(turn.id, 0, limit=10_000_000) for turn in turns}
    digests = sorted({f.sha256 for f in files})
    await session_files.fetch(session.id, digests)
    blob_paths = {sha: session_files.blobs.path(session.id, sha) for sha in digests}
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
    manifest: ArchiveManifest
    events: dict[int, Path]  # position -> spooled, checked events/<n>.jsonl
    blobs: dict[str, tuple[str, int]]  # sha -> (stored sha, size)


def _read_archive(
    source: IO[bytes], blobs: BlobStore, session_id: str, limits: ImportLimits, memory: MemorySettings
) -> _Read:
    """Read the archive once, in order: manifest.json first, then only the events and blobs it lists."""
    manifest: ArchiveManifest | None = None
    listed = _Listed({}, set())
    events: dict[int, Path] = {}
    stored: dict[str, tuple[str, int]] = {}
    try:
        with open_tar(source, limits) as tar:
            for count, member in enumerate(tar, start=1):
                if count > limits.entries:
                    raise ArchiveTooLarge(
                        f"the archive has more than {limits.entries} entries (FLEET_IMPORT_MAX_ENTRIES)"
                    )
                if not is_plain_file(member):
                    continue
                if member.size > limits.file:
                    raise ArchiveTooLarge(
                        f"{member.name[:200]!r} in the archive is larger than the limit of "
                        f"{limits.file // MIB} MiB (FLEET_IMPORT_FILE_LIMIT_MB)"
                    )
                handle = tar.extractfile(member)
                if handle is None:
                    continue
                if member.name == "manifest.json" and manifest is None:
                    if member.size > MAX_MANIFEST_BYTES:
                        raise BadArchive(f"the archive's manifest.json is larger than {MAX_MANIFEST_BYTES} bytes")
                    raw = _check_manifest(parse_json(handle.read(), MAX_MANIFEST_VALUES, "manifest.json"))
                    manifest = validated(ArchiveManifest, raw, "", {MEMORY_TEXT_LIMIT: memory.max_entry_chars})
                    listed = _Listed.of(manifest)
                    continue
                match = _EVENTS.fullmatch(member.name) or _BLOB.fullmatch(member.name)
                if match is None:
                    continue
                if manifest is None:
                    raise BadArchive("not a Fleet session archive (manifest.json must be its first entry)")
                if match.re is _EVENTS:
                    position = int(match[1])
                    if position not in listed.positions or position in events:
                        raise BadArchive(f"{member.name} is not a turn the manifest lists, or comes twice")
                    events[position] = blobs.scratch_file(session_id, ".jsonl")
                    _spool_events(handle, events[position], member.name)
                else:
                    if listed.blobs.get(match[1]) != member.size:
                        raise BadArchive(f"{member.name} is not listed in the manifest with that size")
                    stored[match[1]] = blobs.put_stream(session_id, handle, limit=limits.file)
    except Invalid:
        raise
    except READ_ERRORS as exc:
        raise BadArchive(f"not a readable session archive: {exc}") from exc
    if manifest is None:
        raise BadArchive("not a Fleet session archive (manifest.json is missing)")
    return _Read(manifest, events, stored)


@dataclass(frozen=True)
class _Listed:
    """What the manifest says the archive holds: blob sizes by digest, turn positions."""

    blobs: dict[str, int]
    positions: set[int]

    @classmethod
    def of(cls, manifest: ArchiveManifest) -> _Listed:
        return cls({f.sha256: f.size for f in manifest.files}, {t.position for t in manifest.turns})


def _check_manifest(manifest: Any) -> dict[str, Any]:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BadArchive("not a Fleet session archive (manifest.json is of another format)")
    if manifest.get("version") not in READABLE_VERSIONS:
        raise BadArchive(
            f"session archive version {manifest.get('version')!r} is not supported "
            f"(expected one of {', '.join(map(str, READABLE_VERSIONS))})"
        )
    return manifest


def _spool_events(handle: IO[bytes], spool: Path, name: str) -> None:
    """Copy an events file to ``spool`` a line at a time, checking each line is an event in order."""
    last = 0
    index = 0
    with spool.open("wb") as out:
        while line := handle.readline(MAX_EVENT_LINE_BYTES + 1):
            if len(line) > MAX_EVENT_LINE_BYTES:
                raise BadArchive(f"{name}: an event is longer than {MAX_EVENT_LINE_BYTES} bytes")
            if not line.strip():
                continue
            event = validated(ArchivedEvent, parse_json(line, MAX_EVENT_VALUES, name), f"{name}[{index}]")
            if event.seq <= last:
                raise BadArchive(f"{name}[{index}]: event {event.seq} comes after event {last}")
            last = event.seq
            index += 1
            out.write(event.model_dump_json().encode() + b"\n")


def _read_batch(handle: IO[bytes], turn_id: str) -> list[Event]:
    batch: list[Event] = []
    size = 0
    while len(batch) < EVENT_BATCH and size < EVENT_BATCH_BYTES and (line := handle.readline()):
        size += len(line)
        batch.append(Event.from_dict({**json.loads(line), "turn_id": turn_id}))
    return batch


async def _event_batches(spools: list[tuple[str, Path]]) -> AsyncIterator[list[Event]]:
    """The spooled (already checked) events, a bounded batch at a time."""
    for turn_id, spool in spools:
        with spool.open("rb") as handle:
            while batch := await asyncio.to_thread(_read_batch, handle, turn_id):
                yield batch


async def import_session(
    store: Store,
    session_files: SessionFiles,
    source: IO[bytes],
    server: ServerSettings,
    memory: MemorySettings,
    *,
    name: str | None = None,
) -> SessionRecord:
    """Restore an archive as a new session (new ids). Its name is ``name``, else the archived one.
    Its memory entries become proposals of the new session, waiting for review."""
    session_id = new_session_id()
    blobs = session_files.blobs
    try:
        read = await asyncio.to_thread(_read_archive, source, blobs, session_id, ImportLimits.of(server), memory)
        session = _session(read.manifest.session, session_id, name, server.ceilings)
        turns, spools = _turns(read)
        files = _files(read)
        memories = _memories(read, turns)
        await session_files.share(session_id, (sha for sha, _ in read.blobs.values()))
        restored = await store.restore_session(session, turns, _event_batches(spools), files, memories)
        for spool in read.events.values():
            spool.unlink(missing_ok=True)
        return restored
    except BaseException:
        blobs.remove_session(session_id)
        if session_files.shared is not None:
            await session_files.shared.remove_session(session_id)
        raise


def _session(raw: ArchivedSession, session_id: str, name: str | None, ceilings: Ceilings) -> SessionRecord:
    try:
        stored = check_session_settings(dict(raw.settings or {}), ceilings)
        if raw.mode is not None:
            check_session_settings({"mode": raw.mode}, ceilings)
    except Invalid as exc:
        raise Invalid(f"the archived session's {exc.message}", code=exc.code) from exc
    now = dt.datetime.now(dt.UTC)
    return SessionRecord(
        id=session_id,
        name=name if name is not None else raw.name,
        title=raw.title,
        mode=raw.mode,
        settings=stored,
        created_at=raw.created_at or now,
        updated_at=now,
    )


def _turns(read: _Read) -> tuple[list[TurnRecord], list[tuple[str, Path]]]:
    turns: list[TurnRecord] = []
    spools: list[tuple[str, Path]] = []
    for raw in read.manifest.turns:
        turn_id = new_id("turn")
        turns.append(
            TurnRecord(
                id=turn_id,
                session_id="",
                position=raw.position,
                message=raw.message,
                status=raw.status,
                context_paths=list(raw.context_paths),
                options=dict(raw.options or {}),
                answer=raw.answer,
                answer_source=raw.answer_source,
                unverified_reason=raw.unverified_reason,
                error=raw.error,
                usage=dict(raw.usage or {}),
                artifacts=list(raw.artifacts or []),
                evidence=list(raw.evidence or []),
                program_version=raw.program_version,
                created_at=raw.created_at,
                started_at=raw.started_at,
                finished_at=raw.finished_at,
            )
        )
        if raw.position in read.events:
            spools.append((turn_id, read.events[raw.position]))
    return turns, spools


def _files(read: _Read) -> list[FileRecord]:
    files: list[FileRecord] = []
    for raw in read.manifest.files:
        if read.blobs.get(raw.sha256) != (raw.sha256, raw.size):
            raise BadArchive(f"the bytes of {raw.path!r} are missing from the archive or do not match its digest")
        files.append(FileRecord(raw.path, raw.size, raw.sha256, media_type_of(raw.path, raw.media_type), raw.origin))
    return files


def _memories(read: _Read, turns: list[TurnRecord]) -> list[MemoryRecord]:
    """The archived memory entries, as proposals waiting for review (an archive is outside data)."""
    turn_of = {turn.position: turn.id for turn in turns}
    return [
        MemoryRecord(
            id=new_id("mem"),
            text=raw.text,
            why=raw.why or "",
            status="pending",
            turn_id=turn_of.get(raw.turn_position) if raw.turn_position is not None else None,
            created_at=raw.created_at,
        )
        for raw in read.manifest.memory
    ]
