"""Session file bytes shared between machines: the seam, and its database backend.

Every process keeps the blobs it writes or reads in its own :class:`~fleet_rlm.store.BlobStore` (under
its data directory). With ``worker.file_store = "database"`` the bytes are also stored in the database,
so an API replica or a worker on another machine fetches a blob it does not hold into its own
directory (a cache) before it serves, exports or places it. Bytes move one chunk at a time in both
directions: a blob is never whole in memory.
"""

from __future__ import annotations

import abc
import asyncio
import datetime as dt
import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from sqlalchemy import delete, exists, insert, select, update
from sqlalchemy.exc import IntegrityError

from fleet_rlm.store.blobs import CHUNK
from fleet_rlm.store.database import Database
from fleet_rlm.store.tables import BlobChunkRow, utcnow

SHA256 = re.compile(r"[0-9a-f]{64}")
GRACE = dt.timedelta(hours=1)
"""Unreferenced shared bytes younger than this are kept: an upload or a turn's commit shares its bytes
before the database row that references them is written, possibly by another process."""


class BlobMismatch(OSError):
    """Shared bytes that do not hash to the digest they are stored under (damaged or altered)."""


class SharedBlobs(abc.ABC):
    """Where blobs are kept for every machine: :meth:`put` before a row references them, :meth:`fetch`
    on a machine that does not hold them."""

    @abc.abstractmethod
    async def put(self, session_id: str, sha256: str, source: Path) -> None:
        """Share the finished file ``source`` (this process's own) as ``sha256``; nothing when shared."""

    @abc.abstractmethod
    async def fetch(self, session_id: str, sha256: str, destination: Path) -> bool:
        """Write the shared bytes into ``destination`` (a new file of this process's); False when none
        are shared. Raises :class:`BlobMismatch` when they do not hash to ``sha256``."""

    @abc.abstractmethod
    async def read_range(self, session_id: str, sha256: str, start: int, length: int) -> bytes | None:
        """At most ``length`` bytes of the shared blob from ``start``, without fetching the rest; None
        when it is not shared. Not checked against the digest: for a glance (a file's kind), never for
        serving or placing."""

    @abc.abstractmethod
    async def held(self, session_id: str) -> set[str]:
        """The digests of the session's shared blobs."""

    @abc.abstractmethod
    async def remove_session(self, session_id: str) -> None: ...

    @abc.abstractmethod
    async def stale(self) -> dict[str, list[str]]:
        """The digests of shared bytes older than :data:`GRACE`, by session: the candidates of a garbage
        collection (those their session no longer references go, :meth:`drop`)."""

    @abc.abstractmethod
    async def drop(self, session_id: str, digests: Iterable[str]) -> int:
        """Drop these bytes of the session if they are still older than :data:`GRACE` (not shared again
        since :meth:`stale` listed them); returns how many blobs went."""


def _checked(sha256: str) -> str:
    if not SHA256.fullmatch(sha256):
        raise ValueError(f"not a sha256 digest: {sha256[:80]!r}")
    return sha256


class DatabaseBlobs(SharedBlobs):
    """Blobs in the ``blob_chunks`` table, ``chunk_size`` bytes per row."""

    def __init__(self, database: Database, chunk_size: int = CHUNK) -> None:
        self.database = database
        self.chunk_size = chunk_size

    async def put(self, session_id: str, sha256: str, source: Path) -> None:
        _checked(sha256)
        if await self._touch(session_id, sha256):
            return
        try:
            async with self.database.write() as session:
                with source.open("rb") as handle:
                    seq = 0
                    while True:
                        chunk = await asyncio.to_thread(handle.read, self.chunk_size)
                        if seq and not chunk:
                            break
                        await session.execute(
                            insert(BlobChunkRow).values(session_id=session_id, sha256=sha256, seq=seq, data=chunk)
                        )
                        seq += 1
        except IntegrityError:
            if not await self._touch(session_id, sha256):  # another process shared it meanwhile, or not
                raise

    async def _touch(self, session_id: str, sha256: str) -> bool:
        """Mark shared bytes as just shared again (so no collection takes them before the row about to
        reference them is written); False when there are none."""
        async with self.database.write() as session:
            result = await session.execute(
                update(BlobChunkRow)
                .where(BlobChunkRow.session_id == session_id, BlobChunkRow.sha256 == sha256, BlobChunkRow.seq == 0)
                .values(created_at=utcnow())
            )
            return bool(result.rowcount)  # type: ignore[attr-defined]

    async def _shared(self, session_id: str, sha256: str) -> bool:
        query = select(exists().where(BlobChunkRow.session_id == session_id, BlobChunkRow.sha256 == sha256))
        async with self.database.read() as session:
            return bool(await session.scalar(query))

    async def fetch(self, session_id: str, sha256: str, destination: Path) -> bool:
        _checked(sha256)
        digest = hashlib.sha256()
        seq = 0
        with destination.open("wb") as out:
            while True:
                async with self.database.read() as session:
                    chunk = await session.scalar(
                        select(BlobChunkRow.data).where(
                            BlobChunkRow.session_id == session_id,
                            BlobChunkRow.sha256 == sha256,
                            BlobChunkRow.seq == seq,
                        )
                    )
                if chunk is None:
                    break
                digest.update(chunk)
                await asyncio.to_thread(out.write, chunk)
                seq += 1
        if seq == 0:
            return False
        if digest.hexdigest() != sha256:
            if not await self._shared(session_id, sha256):  # removed while it was read (a deletion)
                return False
            raise BlobMismatch(f"the shared bytes of blob {sha256[:12]}… of session {session_id} do not match it")
        return True

    async def read_range(self, session_id: str, sha256: str, start: int, length: int) -> bytes | None:
        _checked(sha256)
        first, last = start // self.chunk_size, (start + max(length, 1) - 1) // self.chunk_size
        query = (
            select(BlobChunkRow.seq, BlobChunkRow.data)
            .where(
                BlobChunkRow.session_id == session_id,
                BlobChunkRow.sha256 == sha256,
                BlobChunkRow.seq.between(first, last),
            )
            .order_by(BlobChunkRow.seq)
        )
        async with self.database.read() as session:
            chunks = (await session.execute(query)).all()
        if not chunks:
            return b"" if await self._shared(session_id, sha256) else None
        data = b"".join(chunk for _, chunk in chunks)
        offset = start - chunks[0][0] * self.chunk_size
        return data[offset : offset + length]

    async def held(self, session_id: str) -> set[str]:
        query = select(BlobChunkRow.sha256).where(BlobChunkRow.session_id == session_id, BlobChunkRow.seq == 0)
        async with self.database.read() as session:
            return set((await session.execute(query)).scalars())

    async def remove_session(self, session_id: str) -> None:
        async with self.database.write() as session:
            await session.execute(delete(BlobChunkRow).where(BlobChunkRow.session_id == session_id))

    async def stale(self) -> dict[str, list[str]]:
        cutoff = utcnow() - GRACE
        async with self.database.read() as session:
            rows = (
                await session.execute(
                    select(BlobChunkRow.session_id, BlobChunkRow.sha256).where(
                        BlobChunkRow.seq == 0, BlobChunkRow.created_at < cutoff
                    )
                )
            ).all()
        by_session: dict[str, list[str]] = {}
        for session_id, sha256 in rows:
            by_session.setdefault(session_id, []).append(sha256)
        return by_session

    async def drop(self, session_id: str, digests: Iterable[str]) -> int:
        cutoff = utcnow() - GRACE
        removed = 0
        for sha256 in digests:
            blob = (BlobChunkRow.session_id == session_id, BlobChunkRow.sha256 == sha256)
            async with self.database.write() as session:
                still_old = await session.scalar(
                    select(exists().where(*blob, BlobChunkRow.seq == 0, BlobChunkRow.created_at < cutoff))
                )
                if still_old:  # not shared again since it was listed
                    await session.execute(delete(BlobChunkRow).where(*blob))
                    removed += 1
        return removed
