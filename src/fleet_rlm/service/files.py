"""A session's files: uploads, downloads, and moving them in and out of a turn's workspace.

Bytes live in the session's :class:`~fleet_rlm.store.BlobStore`, metadata in the database. A turn
gets private copies in its sandbox's workspace (:func:`materialize`); when it completes, what it
wrote under ``artifacts/`` is collected (:func:`collect_changes`) and committed with the turn.
Files under ``files/`` are the person's uploads: a turn's edits there are not kept, nor are its
writes under ``memory/``, which holds only the reviewed memory (:mod:`fleet_rlm.service.memory`).
Nothing stored under ``memory/`` is ever given to a turn (:func:`given_to_turns`): files turns wrote
there before memory was reviewed stay session files, and the turn's ``memory/MEMORIES.md`` is only
ever the one the service renders from approved entries and writes after every stored file.
Bytes cross into and out of the workspace only through its backend's
:class:`~fleet_rlm.sandbox.base.WorkspaceFiles` (push and pull). With a shared store
(``worker.file_store = "database"``), bytes are shared (:meth:`SessionFiles.share`) before a row
references them, and fetched (:meth:`SessionFiles.fetch`) by a process that does not hold them yet.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from fleet_rlm.config import SandboxSettings
from fleet_rlm.sandbox.base import WorkspaceFiles
from fleet_rlm.store import BlobStore, FileChanges, FileRecord, Invalid
from fleet_rlm.store.shared_blobs import SharedBlobs
from fleet_rlm.workspace.copyout import MIB, CopyBudget, mib_bound
from fleet_rlm.workspace.hashing import hash_copied_out
from fleet_rlm.workspace.kinds import FileKind, detect_kind
from fleet_rlm.workspace.layout import ARTIFACTS, FILES, MEMORY, Workspace
from fleet_rlm.workspace.paths import PathEscapeError, control_character, resolve_inside
from fleet_rlm.workspace.tree import OverBound
from fleet_rlm.workspace.walk import WorkspaceFile, iter_files

log = logging.getLogger(__name__)

STORED_DIRS = (FILES, ARTIFACTS, MEMORY)
KEPT_FROM_TURNS = {ARTIFACTS: "artifact"}
ORIGIN_OF_DIR = {FILES: "upload", ARTIFACTS: "artifact", MEMORY: "memory"}
"""Who stores files under each directory: the person's uploads, turns' artifacts, and (before memory
was reviewed) turns' writes under ``memory/``, kept but never given to turns."""
MAX_NAME_BYTES = 255
"""The longest file name (one path component) Linux file systems take, in bytes of UTF-8."""
MAX_PATH_BYTES = 1024
"""The longest stored path accepted as input: far below PATH_MAX (4096), which sandbox code's
absolute paths (the workspace mount in front) must fit in."""
_VIRTUAL_ROOT = Path("/nonexistent/fleet-workspace")  # never exists, so only the path's own text is judged
_SAMPLE = 4096


def _tail_start(size: int) -> int:
    """Where the last sample of a file of ``size`` bytes starts (after the first sample, never in it)."""
    return max(_SAMPLE, size - _SAMPLE)


def _judged(record: FileRecord, head: bytes, tail: bytes) -> FileKind:
    """The kind of ``record``'s file from its first sample and (a file longer than one) its last."""
    return detect_kind(record.path, head, tail, head_is_whole_file=record.size <= _SAMPLE)


class BadPath(Invalid):
    code = "invalid_path"


def clean_path(rel: str, *, within: str | None = None) -> str:
    """``rel`` normalized (``a//b/./c`` -> ``a/b/c``); raises BadPath for anything that is not a plain
    relative path (absolute, ``..``, NUL, backslash, empty). With ``within``, relative to that dir."""
    try:
        resolved = resolve_inside(_VIRTUAL_ROOT / within if within else _VIRTUAL_ROOT, rel)
    except PathEscapeError as exc:
        raise BadPath(str(exc)) from exc
    return resolved.relative_to(_VIRTUAL_ROOT).as_posix()


def input_path(rel: str, *, within: str | None = None) -> str:
    """:func:`clean_path` for a path a person or an archive names (an upload, an import), which every
    turn's workspace must then hold: no control character (nor could a URL name it), valid Unicode,
    each name at most :data:`MAX_NAME_BYTES` bytes and the whole at most :data:`MAX_PATH_BYTES`."""
    clean = clean_path(rel, within=within)
    control = control_character(clean)
    if control is not None:
        raise BadPath(f"refused path {rel!r}: it holds the control character U+{ord(control):04X}")
    try:
        encoded = clean.encode("utf-8")
    except UnicodeEncodeError:
        raise BadPath(f"refused path {rel!r}: it is not valid Unicode (it holds a lone surrogate)") from None
    longest = max(PurePosixPath(clean).parts, key=lambda name: len(name.encode()))
    if len(longest.encode()) > MAX_NAME_BYTES:
        raise BadPath(
            f"refused path {rel[:300]!r}: the name {longest[:60]!r}... is {len(longest.encode())} bytes long; "
            f"file systems take at most {MAX_NAME_BYTES} bytes of UTF-8 per name"
        )
    if len(encoded) > MAX_PATH_BYTES:
        raise BadPath(f"refused path {rel[:300]!r}...: it is {len(encoded)} bytes long, more than {MAX_PATH_BYTES}")
    return clean


def given_to_turns(record: FileRecord) -> bool:
    """Whether turns get this stored file in their workspace: never one under ``memory/``, where only
    the reviewed memory goes (whatever a row's origin says, an imported one included)."""
    return PurePosixPath(record.path).parts[0] != MEMORY


def stored_path(rel: str) -> str:
    """A path naming a stored file (``files/...``, ``artifacts/...`` or ``memory/...``)."""
    clean = clean_path(rel)
    if PurePosixPath(clean).parts[0] not in STORED_DIRS or "/" not in clean:
        raise BadPath(f"refused path {rel!r}: session files live under {', '.join(d + '/' for d in STORED_DIRS)}")
    return clean


_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}")
"""``type/subtype`` (RFC 6838); a declared type that is not one is not stored, nor served back."""


def is_media_type(value: str) -> bool:
    """``value`` is a bare ``type/subtype`` as :func:`media_type_of` stores and serves them."""
    return _MEDIA_TYPE.fullmatch(value) is not None


def media_type_of(path: str, declared: str | None = None) -> str:
    guessed, _ = mimetypes.guess_type(path, strict=False)
    if guessed:
        return guessed
    essence = (declared or "").split(";", 1)[0].strip().lower()
    if _MEDIA_TYPE.fullmatch(essence) and essence != "application/octet-stream":
        return essence
    return "application/octet-stream"


@dataclass(frozen=True)
class ArtifactBudget:
    """The bounds on what a turn's artifacts may add to the host: ``sandbox.copy_out_turn_mb`` for the
    turn, ``sandbox.copy_out_session_mb`` for the session's artifacts all together."""

    turn_mb: int
    session_mb: int
    stored: Mapping[str, int]
    """Size of each artifact the session holds, by path (those the turn leaves as they are count)."""

    @classmethod
    def of(cls, settings: SandboxSettings, records: Iterable[FileRecord]) -> ArtifactBudget:
        stored = {r.path: r.size for r in records if PurePosixPath(r.path).parts[0] in KEPT_FROM_TURNS}
        return cls(settings.copy_out_turn_mb, settings.copy_out_session_mb, stored)


@dataclass
class SessionFiles:
    blobs: BlobStore
    shared: SharedBlobs | None = None
    """Where the bytes are kept for every machine; None: this data directory is the only store."""

    async def share(self, session_id: str, digests: Iterable[str]) -> None:
        """Put these blobs of this process's in the shared store: before a row references them."""
        if self.shared is None:
            return
        for sha in dict.fromkeys(digests):
            await self.shared.put(session_id, sha, self.blobs.path(session_id, sha))

    async def share_unshared(self, session_id: str, digests: set[str]) -> None:
        """Share those of ``digests`` this process holds and the shared store does not (files stored
        here before the switch to a shared store); one query, and nothing written for the rest."""
        if self.shared is None:
            return
        missing = digests - await self.shared.held(session_id)
        here = await asyncio.to_thread(lambda: [sha for sha in missing if self.blobs.path(session_id, sha).is_file()])
        await self.share(session_id, here)

    async def fetch(self, session_id: str, digests: Iterable[str]) -> None:
        """Bring the blobs this process does not hold from the shared store into its own, one chunk at
        a time. A blob the shared store lacks too stays missing (its readers say so)."""
        if self.shared is None:
            return
        for sha in dict.fromkeys(digests):
            if await asyncio.to_thread(self.blobs.path(session_id, sha).is_file):
                continue
            scratch = await asyncio.to_thread(self.blobs.scratch_file, session_id)
            try:
                found = await self.shared.fetch(session_id, sha, scratch)
            except BaseException:
                scratch.unlink(missing_ok=True)
                raise
            if found:
                await asyncio.to_thread(self.blobs.adopt, session_id, scratch)
            else:
                scratch.unlink(missing_ok=True)

    async def fetch_records(self, session_id: str, records: Iterable[FileRecord]) -> None:
        await self.fetch(session_id, (record.sha256 for record in records))

    def store_upload(self, session_id: str, rel: str, source: BinaryIO, limit: int, declared: str | None) -> FileRecord:
        """Stream an upload into the blob store; the record is for ``files/<rel>``."""
        path = input_path(rel, within=FILES)
        sha, size = self.blobs.put_stream(session_id, source, limit)
        return FileRecord(path=path, size=size, sha256=sha, media_type=media_type_of(path, declared), origin="upload")

    def blob_path(self, session_id: str, record: FileRecord) -> Path:
        return self.blobs.path(session_id, record.sha256)

    def kind(self, session_id: str, record: FileRecord) -> FileKind:
        """What the file holds (text, table, image, ...), from its first and last bytes in this process's copy."""
        blob = self.blob_path(session_id, record)
        try:
            with blob.open("rb") as handle:
                head = handle.read(_SAMPLE)
                tail = b""
                if record.size > _SAMPLE:
                    handle.seek(_tail_start(record.size))
                    tail = handle.read(_SAMPLE)
        except OSError:
            return FileKind.BINARY
        return _judged(record, head, tail)

    async def kinds(self, session_id: str, records: list[FileRecord]) -> list[FileKind]:
        """Each file's :meth:`kind`; a file this process does not hold is judged from its first and last
        bytes in the shared store, never fetched whole (listing a session's files on another machine must
        not copy every input there)."""
        kinds: list[FileKind] = []
        for record in records:
            here = await asyncio.to_thread(self.blob_path(session_id, record).is_file)
            if here or self.shared is None:
                kinds.append(await asyncio.to_thread(self.kind, session_id, record))
                continue
            head = await self.shared.read_range(session_id, record.sha256, 0, _SAMPLE)
            tail = b""
            if head is not None and record.size > _SAMPLE:
                tail = await self.shared.read_range(session_id, record.sha256, _tail_start(record.size), _SAMPLE) or b""
            kinds.append(FileKind.BINARY if head is None else _judged(record, head, tail))
        return kinds

    def materialize(self, session_id: str, records: list[FileRecord], files: WorkspaceFiles) -> dict[str, str]:
        """Push the session's files into a turn's workspace (its sandbox may already run); returns
        path -> sha256 of what was put there."""
        placed: dict[str, str] = {}
        for record in records:
            if not given_to_turns(record):
                continue
            files.push(self.blob_path(session_id, record), record.path)
            placed[record.path] = record.sha256
        return placed

    def collect_changes(
        self,
        session_id: str,
        workspace: Workspace,
        files: WorkspaceFiles,
        before: Mapping[str, str],
        budget: ArtifactBudget,
    ) -> tuple[FileChanges, dict[str, str]]:
        """What the turn changed under ``artifacts/``, with new bytes already stored, and the warning for
        each new artifact that was not (sparse, or over the turn's or the session's bound).

        Links and special files are never followed or opened (see :mod:`fleet_rlm.workspace.tree`)."""
        upserts: list[FileRecord] = []
        seen: set[str] = set()
        changed: list[WorkspaceFile] = []
        tree = workspace.tree
        for top in KEPT_FROM_TURNS:
            for found in iter_files(tree, under=top):
                try:
                    if found.rel in before and before[found.rel] == hash_copied_out(found, budget.turn_mb * MIB):
                        seen.add(found.rel)
                        continue
                except OverBound:  # not the stored version: its pull refuses it, with a warning
                    pass
                except OSError:  # changed or replaced since it was listed: not collected
                    continue
                changed.append(found)
        changed_paths = {found.rel for found in changed}
        # Every stored artifact still there counts until a new version replaces it: the unchanged ones,
        # and a changed one whose new version is refused (its stored version stays).
        session = mib_bound(
            "the session's",
            "sandbox.copy_out_session_mb",
            budget.session_mb,
            used=sum(size for path, size in budget.stored.items() if path in seen or path in changed_paths),
        )
        copies = CopyBudget([mib_bound("the turn's", "sandbox.copy_out_turn_mb", budget.turn_mb), session])
        for found in changed:
            origin = KEPT_FROM_TURNS[PurePosixPath(found.rel).parts[0]]
            replaced = budget.stored.get(found.rel, 0)
            session.used -= replaced  # the new version takes its place, if it is copied
            try:
                pulled = copies.copy(found.rel, partial(self._pull_blob, session_id, files, found.rel), _size)
            except OSError:  # changed or replaced since it was listed: not collected
                continue
            seen.add(found.rel)  # a refused file leaves its stored version as it was
            if pulled is None:
                session.used += replaced
            else:
                sha, size = pulled
                upserts.append(FileRecord(found.rel, size, sha, media_type_of(found.rel), origin))
        deletions = sorted(
            path for path in before if PurePosixPath(path).parts[0] in KEPT_FROM_TURNS and path not in seen
        )
        return FileChanges(upserts=upserts, deletions=deletions), copies.refused

    def _pull_blob(self, session_id: str, files: WorkspaceFiles, rel: str, limit: int) -> tuple[str, int]:
        scratch = self.blobs.scratch_file(session_id)
        try:
            files.pull(rel, scratch, limit=limit)
        except BaseException:
            scratch.unlink(missing_ok=True)
            raise
        return self.blobs.adopt(session_id, scratch)


def _size(stored: tuple[str, int]) -> int:
    return stored[1]


FileIdentity = tuple[str, int, int, int]
"""A placed file's sha256 and its size, modification time and inode right after it was placed."""


def refresh_workspace(
    session_files: SessionFiles,
    session_id: str,
    records: list[FileRecord],
    files: WorkspaceFiles,
    workspace: Workspace,
    placed: Mapping[str, FileIdentity],
) -> dict[str, FileIdentity]:
    """Bring a kept workspace (a session kernel's) to the session's files as stored now.

    A layout directory the sandbox replaced (with a file, a link, a pipe) is made again. What the last
    turn left under the stored directories that the session does not hold (a failed turn's artifacts,
    a deleted upload, the sandbox's own writes) is removed, never through a link;
    a stored file is pushed again unless the very file placed last time is still there unchanged.
    Returns what is placed now, for the next turn."""
    wanted = {r.path: r for r in records if given_to_turns(r)}
    restored = workspace.restore_layout()
    if restored:
        log.warning("session %s: its kernel's code replaced %s; made again", session_id, ", ".join(restored))
    tree = workspace.tree
    present = {entry.rel: entry for top in STORED_DIRS for entry in tree.walk(top)}
    for rel in present:
        if rel not in wanted:
            tree.remove(rel)
    now: dict[str, FileIdentity] = {}
    for path, record in wanted.items():
        entry = present.get(path)
        before = placed.get(path)
        if entry is not None and before == (record.sha256, entry.size, entry.mtime_ns, entry.inode):
            now[path] = before
            continue
        files.push(session_files.blob_path(session_id, record), path)
        fresh = tree.entry(path)
        if fresh is not None:
            now[path] = (record.sha256, fresh.size, fresh.mtime_ns, fresh.inode)
    tree.take_skipped()
    return now
