"""Session file bytes shared through the database, on SQLite and PostgreSQL: chunked both ways, never
whole in memory, checked against their digest when fetched, collected when nothing references them."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import tracemalloc
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select, update

from fleet_rlm.store import Store
from fleet_rlm.store.shared_blobs import GRACE, BlobMismatch, DatabaseBlobs
from fleet_rlm.store.tables import BlobChunkRow, utcnow

pytestmark = pytest.mark.anyio


def written(tmp_path: Path, name: str, data: bytes) -> tuple[Path, str]:
    path = tmp_path / name
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


async def chunk_count(store: Store, sha256: str | None = None) -> int:
    query = select(func.count()).select_from(BlobChunkRow)
    if sha256 is not None:
        query = query.where(BlobChunkRow.sha256 == sha256)
    async with store.db.read() as session:
        return int(await session.scalar(query) or 0)


async def test_a_blob_goes_in_chunks_and_comes_back_whole_on_another_machine(store: Store, tmp_path: Path) -> None:
    shared = DatabaseBlobs(store.db, chunk_size=1000)
    data = os.urandom(3500)
    source, sha = written(tmp_path, "source", data)
    await shared.put("ses_1", sha, source)
    await shared.put("ses_1", sha, source)  # already shared: nothing more is written
    assert await chunk_count(store, sha) == 4

    elsewhere = tmp_path / "other-machine"
    assert await shared.fetch("ses_1", sha, elsewhere) is True
    assert elsewhere.read_bytes() == data

    empty, empty_sha = written(tmp_path, "empty", b"")
    await shared.put("ses_1", empty_sha, empty)
    assert await shared.fetch("ses_1", empty_sha, tmp_path / "empty-back") is True
    assert (tmp_path / "empty-back").read_bytes() == b""


async def test_a_range_is_read_from_the_chunks_holding_it_only(store: Store, tmp_path: Path) -> None:
    shared = DatabaseBlobs(store.db, chunk_size=1000)
    data = os.urandom(3500)
    source, sha = written(tmp_path, "source", data)
    await shared.put("ses_1", sha, source)

    assert await shared.read_range("ses_1", sha, 0, 100) == data[:100]
    assert await shared.read_range("ses_1", sha, 950, 100) == data[950:1050]  # across two chunks
    assert await shared.read_range("ses_1", sha, 3400, 500) == data[3400:]  # cut at the end
    assert await shared.read_range("ses_1", sha, 5000, 10) == b""  # past the end of a shared blob
    assert await shared.read_range("ses_2", sha, 0, 10) is None  # another session's
    assert await shared.read_range("ses_1", "0" * 64, 0, 10) is None
    with pytest.raises(ValueError, match="not a sha256 digest"):
        await shared.read_range("ses_1", "../../etc/passwd", 0, 10)


async def test_a_blob_not_shared_is_reported_missing_and_a_session_sees_only_its_own(
    store: Store, tmp_path: Path
) -> None:
    shared = DatabaseBlobs(store.db)
    source, sha = written(tmp_path, "source", b"a,b\n1,2\n")
    await shared.put("ses_1", sha, source)
    assert await shared.fetch("ses_2", sha, tmp_path / "other") is False
    assert await shared.fetch("ses_1", "0" * 64, tmp_path / "unknown") is False
    with pytest.raises(ValueError, match="not a sha256 digest"):
        await shared.fetch("ses_1", "../../etc/passwd", tmp_path / "escape")


async def test_altered_shared_bytes_are_refused_not_served(store: Store, tmp_path: Path) -> None:
    shared = DatabaseBlobs(store.db, chunk_size=4)
    source, sha = written(tmp_path, "source", b"north,7811\n")
    await shared.put("ses_1", sha, source)
    async with store.db.write() as session:
        await session.execute(update(BlobChunkRow).where(BlobChunkRow.seq == 1).values(data=b"9999"))
    with pytest.raises(BlobMismatch, match="do not match"):
        await shared.fetch("ses_1", sha, tmp_path / "fetched")


async def test_a_large_blob_never_sits_whole_in_memory(store: Store, tmp_path: Path) -> None:
    size = 24 * 1024 * 1024
    source = tmp_path / "large"
    digest = hashlib.sha256()
    with source.open("wb") as out:
        for _ in range(size // (1024 * 1024)):
            block = os.urandom(1024 * 1024)
            digest.update(block)
            out.write(block)
    sha = digest.hexdigest()
    shared = DatabaseBlobs(store.db)

    tracemalloc.start()
    try:
        await shared.put("ses_1", sha, source)
        _, put_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        assert await shared.fetch("ses_1", sha, tmp_path / "fetched")
        _, fetch_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (tmp_path / "fetched").stat().st_size == size
    assert put_peak < size / 3, f"put held {put_peak} bytes at once"
    assert fetch_peak < size / 3, f"fetch held {fetch_peak} bytes at once"


async def test_garbage_collection_drops_only_old_bytes_nothing_references(store: Store, tmp_path: Path) -> None:
    shared = DatabaseBlobs(store.db)
    kept_path, kept = written(tmp_path, "kept", b"referenced")
    old_path, old = written(tmp_path, "old", b"no longer referenced")
    young_path, young = written(tmp_path, "young", b"just shared, its row not yet written")
    gone_path, gone = written(tmp_path, "gone", b"of a deleted session")
    for session_id, sha, path in (
        ("ses_1", kept, kept_path),
        ("ses_1", old, old_path),
        ("ses_1", young, young_path),
        ("ses_gone", gone, gone_path),
    ):
        await shared.put(session_id, sha, path)
    long_ago = utcnow() - GRACE - dt.timedelta(minutes=1)
    async with store.db.write() as session:
        await session.execute(update(BlobChunkRow).where(BlobChunkRow.sha256 != young).values(created_at=long_ago))

    stale = await shared.stale()
    assert {session_id: set(digests) for session_id, digests in stale.items()} == {
        "ses_1": {kept, old},
        "ses_gone": {gone},
    }
    assert await shared.drop("ses_1", [old]) + await shared.drop("ses_gone", [gone]) == 2
    assert [await chunk_count(store, sha) for sha in (kept, old, young, gone)] == [1, 0, 1, 0]

    await shared.remove_session("ses_1")
    assert await chunk_count(store) == 0


async def test_bytes_shared_again_while_a_collection_runs_are_kept(store: Store, tmp_path: Path) -> None:
    """A collection lists old unreferenced bytes; before it deletes them, an upload of the same content
    shares them again (its row not yet written): they stay."""
    shared = DatabaseBlobs(store.db)
    path, sha = written(tmp_path, "again", b"uploaded, deleted, uploaded again")
    await shared.put("ses_1", sha, path)
    long_ago = utcnow() - GRACE - dt.timedelta(minutes=1)
    async with store.db.write() as session:
        await session.execute(update(BlobChunkRow).values(created_at=long_ago))

    assert await shared.stale() == {"ses_1": [sha]}
    await shared.put("ses_1", sha, path)  # the upload, between the listing and the deletion
    assert await shared.drop("ses_1", [sha]) == 0
    assert await shared.fetch("ses_1", sha, tmp_path / "fetched") is True


async def test_bytes_deleted_while_they_are_fetched_are_reported_missing_not_damaged(
    store: Store, tmp_path: Path
) -> None:
    path, sha = written(tmp_path, "source", b"north,7811\nsouth,6813\n")
    await DatabaseBlobs(store.db, chunk_size=4).put("ses_1", sha, path)
    async with store.db.write() as session:  # the deletion has taken the later chunks already ...
        await session.execute(delete(BlobChunkRow).where(BlobChunkRow.seq >= 2))

    class DeletedMeanwhile(DatabaseBlobs):
        async def _shared(self, session_id: str, sha256: str) -> bool:
            await self.remove_session(session_id)  # ... and the rest by the time the fetch looks again
            return await super()._shared(session_id, sha256)

    assert await DeletedMeanwhile(store.db, chunk_size=4).fetch("ses_1", sha, tmp_path / "fetched") is False
