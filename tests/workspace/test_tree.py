"""The safe file layer: links are never followed, special files never opened, writes never land
outside the tree, whatever sandbox code planted there."""

import os
import threading
from pathlib import Path

import pytest

from fleet_rlm.workspace.tree import MAX_DEPTH, SPARSE_SLACK, OverBound, SafeTree, UnsafeEntry
from fleet_rlm.workspace.walk import FileChanged, stat_file


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    directory = tmp_path / "host"
    directory.mkdir()
    (directory / "secret.txt").write_text("host secret")
    return directory


@pytest.fixture
def tree(tmp_path: Path) -> SafeTree:
    root = tmp_path / "ws"
    (root / "artifacts").mkdir(parents=True)
    return SafeTree(root)


def test_open_refuses_a_link_to_a_host_file(tree: SafeTree, outside: Path) -> None:
    (tree.root / "artifacts" / "leak.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(UnsafeEntry, match="symbolic link"):
        tree.open("artifacts/leak.txt")


def test_open_refuses_a_path_through_a_linked_directory(tree: SafeTree, outside: Path) -> None:
    (tree.root / "artifacts" / "dir").symlink_to(outside)
    with pytest.raises(UnsafeEntry, match="artifacts/dir is a symbolic link"):
        tree.open("artifacts/dir/secret.txt")


def test_open_of_a_fifo_neither_blocks_nor_reads(tree: SafeTree) -> None:
    os.mkfifo(tree.root / "artifacts" / "pipe")
    finished = threading.Event()

    def attempt() -> None:
        with pytest.raises(UnsafeEntry, match="a FIFO"):
            tree.open("artifacts/pipe")
        finished.set()

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(5)
    assert finished.is_set(), "opening a FIFO blocked the host"


def test_walk_lists_regular_files_and_reports_what_it_skipped(tree: SafeTree, outside: Path) -> None:
    (tree.root / "artifacts" / "ok.csv").write_text("a\n1\n")
    (tree.root / "artifacts" / "link.txt").symlink_to(outside / "secret.txt")
    (tree.root / "artifacts" / "linked-dir").symlink_to(outside)
    os.mkfifo(tree.root / "artifacts" / "pipe")

    found = tree.walk()

    assert [entry.rel for entry in found] == ["artifacts/ok.csv"]
    skipped = {item.rel: item.what for item in tree.take_skipped()}
    assert skipped == {
        "artifacts/link.txt": "a symbolic link",
        "artifacts/linked-dir": "a symbolic link",
        "artifacts/pipe": "a FIFO",
    }
    assert tree.take_skipped() == []


def test_walk_stops_at_the_depth_limit(tree: SafeTree) -> None:
    deep = tree.root.joinpath(*["d"] * (MAX_DEPTH + 3))
    deep.mkdir(parents=True)
    (deep / "bottom.txt").write_text("x")
    assert tree.walk() == []
    assert any("nested deeper" in item.what for item in tree.take_skipped())


def test_write_replaces_a_planted_link_instead_of_writing_through_it(tree: SafeTree, outside: Path) -> None:
    target = tree.root / "artifacts" / "out.txt"
    target.symlink_to(outside / "secret.txt")

    tree.write("artifacts/out.txt", b"new content")

    assert (outside / "secret.txt").read_text() == "host secret"
    assert not target.is_symlink()
    assert target.read_bytes() == b"new content"


def test_write_replaces_a_planted_fifo_without_blocking(tree: SafeTree) -> None:
    os.mkfifo(tree.root / "artifacts" / "out.txt")
    tree.write("artifacts/out.txt", b"data")
    assert (tree.root / "artifacts" / "out.txt").read_bytes() == b"data"


def test_write_never_creates_through_a_linked_parent(tree: SafeTree, outside: Path) -> None:
    (tree.root / "artifacts" / "children").symlink_to(outside)
    with pytest.raises(UnsafeEntry, match="artifacts/children is a symbolic link"):
        tree.write("artifacts/children/c1/report.md", b"x")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_write_makes_shared_files_and_leaves_no_staging_file(tree: SafeTree) -> None:
    tree.write("artifacts/new/deep/x.txt", b"x")
    made = tree.root / "artifacts" / "new" / "deep"
    assert os.stat(made / "x.txt").st_mode & 0o777 == 0o666
    assert os.stat(made).st_mode & 0o777 == 0o777
    assert os.listdir(made) == ["x.txt"]


def test_remove_unlinks_a_link_itself(tree: SafeTree, outside: Path) -> None:
    (tree.root / "artifacts" / "link").symlink_to(outside / "secret.txt")
    tree.remove("artifacts/link")
    tree.remove("artifacts/missing")
    assert (outside / "secret.txt").exists()
    assert not (tree.root / "artifacts" / "link").is_symlink()


def test_a_file_swapped_for_a_link_after_listing_is_not_read(tree: SafeTree, outside: Path) -> None:
    path = tree.root / "artifacts" / "report.txt"
    path.write_text("mine")
    listed = stat_file(tree, "artifacts/report.txt")
    assert listed is not None
    path.unlink()
    path.symlink_to(outside / "secret.txt")
    with pytest.raises(UnsafeEntry):
        listed.open()


def test_a_file_replaced_after_listing_is_reported_as_changed(tree: SafeTree) -> None:
    path = tree.root / "artifacts" / "report.txt"
    path.write_text("first")
    listed = stat_file(tree, "artifacts/report.txt")
    assert listed is not None
    replacement = tree.root / "artifacts" / "other.txt"
    replacement.write_text("second")
    replacement.replace(path)
    with pytest.raises(FileChanged):
        listed.open()


def test_read_bytes_is_bounded(tree: SafeTree) -> None:
    (tree.root / "artifacts" / "big").write_bytes(b"x" * 100)
    assert tree.read_bytes("artifacts/big", 100) == b"x" * 100
    with pytest.raises(ValueError, match="larger than 99 bytes"):
        tree.read_bytes("artifacts/big", 99)


def test_open_bounded_refuses_a_file_larger_than_its_bound_before_reading_it(tree: SafeTree) -> None:
    (tree.root / "artifacts" / "big.bin").write_bytes(b"x" * 1001)
    with (
        pytest.raises(OverBound, match="larger than its bound of 1000 bytes") as refused,
        tree.open_bounded("artifacts/big.bin", 1000),
    ):
        pass
    assert refused.value.past_limit


def test_open_bounded_stops_at_the_size_it_checked_when_the_file_grows_after_it_was_opened(tree: SafeTree) -> None:
    path = tree.root / "artifacts" / "grows.bin"
    path.write_bytes(b"a" * 100)
    with tree.open_bounded("artifacts/grows.bin", 1 << 30) as handle:
        assert handle.read(60) == b"a" * 60
        with path.open("ab") as more:  # as sandbox code would, between the host's reads
            more.write(b"b" * 10_000)
        with pytest.raises(OverBound, match="grew past its 100 bytes while it was copied out") as refused:
            while handle.read(1 << 20):
                pass
    assert not refused.value.past_limit


def test_open_bounded_refuses_a_file_made_sparse_by_truncate_after_the_first_read(tree: SafeTree) -> None:
    """Code watching with inotify extends the file with a hole once the host has read it: the bound is the
    size checked for holes, not the whole budget given."""
    path = tree.root / "artifacts" / "truncated.bin"
    path.write_bytes(b"a" * 4096)
    with tree.open_bounded("artifacts/truncated.bin", 1 << 40) as handle:
        assert handle.read(4096) == b"a" * 4096
        os.truncate(path, 512 * 1024 * 1024)
        read = 0
        with pytest.raises(OverBound, match="grew past its 4096 bytes"):
            while chunk := handle.read(1 << 20):
                read += len(chunk)
    assert read == 0


def test_open_bounded_refuses_at_its_end_a_file_whose_bytes_became_a_hole(tree: SafeTree) -> None:
    path = tree.root / "artifacts" / "punched.bin"
    with path.open("wb") as out:
        out.write(os.urandom(SPARSE_SLACK * 4))
    with tree.open_bounded("artifacts/punched.bin", 1 << 30) as handle:
        assert len(handle.read(4096)) == 4096
        with path.open("r+b") as out:  # the same size, its bytes now a hole
            out.truncate(0)
            out.truncate(SPARSE_SLACK * 4)
        with pytest.raises(OverBound, match="it is sparse"):
            while handle.read(1 << 20):
                pass


def test_open_bounded_reads_a_file_of_exactly_its_bound(tree: SafeTree) -> None:
    (tree.root / "artifacts" / "exact.bin").write_bytes(b"x" * 1000)
    with tree.open_bounded("artifacts/exact.bin", 1000) as handle:
        assert handle.read() == b"x" * 1000
        assert handle.read() == b""


def test_open_bounded_refuses_a_sparse_file_but_not_one_with_a_small_hole(tree: SafeTree) -> None:
    with (tree.root / "artifacts" / "sparse.bin").open("wb") as out:
        out.write(b"head")
        out.truncate(SPARSE_SLACK * 64)
    with (tree.root / "artifacts" / "small-hole.bin").open("wb") as out:
        out.write(b"head")
        out.seek(64 * 1024)
        out.write(b"tail")
    with pytest.raises(OverBound, match="it is sparse") as refused, tree.open_bounded("artifacts/sparse.bin", 1 << 30):
        pass
    assert not refused.value.past_limit
    with tree.open_bounded("artifacts/small-hole.bin", 1 << 20) as handle:
        data = handle.read()
    assert data.startswith(b"head") and data.endswith(b"tail") and len(data) == 64 * 1024 + 4
