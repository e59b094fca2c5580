from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from fleet_rlm.store import BlobStore, TooLarge
from fleet_rlm.workspace.layout import Workspace


def test_same_content_is_stored_once_and_copied_out_independently(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path)
    sha, size = blobs.put_stream("ses_1", io.BytesIO(b"a,b\n1,2\n"))
    assert (sha, size) == (hashlib.sha256(b"a,b\n1,2\n").hexdigest(), 8)
    source = tmp_path / "artifact.csv"
    source.write_bytes(b"a,b\n1,2\n")
    assert blobs.put_file("ses_1", source) == (sha, size)
    assert len(list((tmp_path / "ses_1" / "blobs").iterdir())) == 1

    workspace = Workspace.create(tmp_path / "ws")
    with blobs.open("ses_1", sha) as blob:
        workspace.tree.write("files/x.csv", blob)
    (workspace.files_dir / "x.csv").write_bytes(b"changed by the sandbox")
    assert blobs.path("ses_1", sha).read_bytes() == b"a,b\n1,2\n"


def test_oversize_stream_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path)
    with pytest.raises(TooLarge):
        blobs.put_stream("ses_1", io.BytesIO(b"x" * 5000), limit=4096)
    assert list((tmp_path / "ses_1" / "staging").iterdir()) == []
    assert not (tmp_path / "ses_1" / "blobs").exists()


def test_garbage_collection_keeps_only_referenced_blobs(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path)
    keep, _ = blobs.put_stream("ses_1", io.BytesIO(b"keep"))
    drop, _ = blobs.put_stream("ses_1", io.BytesIO(b"drop"))
    (tmp_path / "ses_1" / "staging" / "half-written").write_bytes(b"...")
    assert blobs.collect_garbage("ses_1", {keep}) == 2
    assert blobs.path("ses_1", keep).exists() and not blobs.path("ses_1", drop).exists()


def test_an_adopted_scratch_file_becomes_the_blob_of_its_content_without_a_copy_left(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path)
    first, second = blobs.scratch_file("ses_1"), blobs.scratch_file("ses_1")
    first.write_bytes(b"pulled out of a sandbox")
    second.write_bytes(b"pulled out of a sandbox")

    sha, size = blobs.adopt("ses_1", first)
    assert (sha, size) == (hashlib.sha256(b"pulled out of a sandbox").hexdigest(), 23)
    assert blobs.adopt("ses_1", second) == (sha, size)

    assert blobs.path("ses_1", sha).read_bytes() == b"pulled out of a sandbox"
    assert list((tmp_path / "ses_1" / "staging").iterdir()) == []
    assert len(list((tmp_path / "ses_1" / "blobs").iterdir())) == 1
