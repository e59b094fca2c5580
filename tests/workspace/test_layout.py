import os
from pathlib import Path

import pytest

from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.paths import PathEscapeError
from fleet_rlm.workspace.tree import UnsafeEntry


def test_create_makes_the_layout_and_is_idempotent(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path / "ws")
    for directory in (ws.files_dir, ws.artifacts_dir, ws.memory_dir, ws.tmp_dir):
        assert directory.is_dir()
    (ws.files_dir / "kept.txt").write_text("still here")

    again = Workspace.create(tmp_path / "ws")

    assert again == ws
    assert (again.files_dir / "kept.txt").read_text() == "still here"


def test_create_refuses_a_file_as_root(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    with pytest.raises(NotADirectoryError, match="plain"):
        Workspace.create(tmp_path / "plain")


def test_add_file_copies_into_files_under_its_name_or_dest(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path / "ws")
    src = tmp_path / "sales.csv"
    src.write_bytes(b"region,amount\nnorth,3\n")

    default = ws.add_file(src)
    nested = ws.add_file(src, "q1/renamed.csv")

    assert default == ws.files_dir.resolve() / "sales.csv"
    assert nested == ws.files_dir.resolve() / "q1" / "renamed.csv"
    assert default.read_bytes() == nested.read_bytes() == src.read_bytes()
    assert src.exists()
    assert os.stat(default).st_mode & 0o777 == 0o644


def test_add_file_replaces_an_existing_file(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path / "ws")
    src = tmp_path / "a.txt"
    src.write_text("one")
    ws.add_file(src)
    src.write_text("two")
    assert ws.add_file(src).read_text() == "two"


@pytest.mark.parametrize("dest", ["../artifacts/x.csv", "/tmp/x.csv", "", "a\x00b"])
def test_add_file_refuses_a_dest_outside_files(tmp_path: Path, dest: str) -> None:
    ws = Workspace.create(tmp_path / "ws")
    src = tmp_path / "a.txt"
    src.write_text("x")
    with pytest.raises(PathEscapeError):
        ws.add_file(src, dest)
    assert not (ws.artifacts_dir / "x.csv").exists()


def test_add_file_needs_an_existing_regular_file(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path / "ws")
    with pytest.raises(FileNotFoundError, match=r"missing\.csv"):
        ws.add_file(tmp_path / "missing.csv")
    with pytest.raises(FileNotFoundError, match="not an existing regular file"):
        ws.add_file(tmp_path)


def test_write_bytes_creates_parents_and_leaves_no_staging_files(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path / "ws")
    path = ws.write_bytes("artifacts/report/summary.md", b"# Summary\n")
    assert path.read_bytes() == b"# Summary\n"
    assert list(ws.tmp_dir.iterdir()) == []


def test_write_bytes_refuses_escapes_and_symlinked_parents(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path / "ws")
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws.artifacts_dir / "out").symlink_to(outside)
    with pytest.raises(UnsafeEntry, match="artifacts/out is a symbolic link"):
        ws.write_bytes("artifacts/out/x.txt", b"x")
    with pytest.raises(PathEscapeError):
        ws.write_bytes("../x.txt", b"x")
    assert list(outside.iterdir()) == []


def test_write_bytes_refuses_to_replace_a_directory(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path / "ws")
    with pytest.raises(IsADirectoryError):
        ws.write_bytes("artifacts", b"x")
