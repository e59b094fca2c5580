import os
from pathlib import Path

from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.snapshot import changed_since, snapshot


def test_new_and_modified_artifacts_are_reported_and_nothing_else(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path / "ws")
    ws.write_bytes("artifacts/unchanged.txt", b"same")
    ws.write_bytes("artifacts/edited.csv", b"a\n1\n")
    ws.write_bytes("artifacts/deleted.txt", b"bye")
    before = snapshot(ws)

    ws.write_bytes("artifacts/edited.csv", b"a\n1\n2\n")
    ws.write_bytes("artifacts/charts/revenue.png", b"\x89PNG\r\n\x1a\n")
    (ws.artifacts_dir / "deleted.txt").unlink()
    ws.write_bytes("files/input.csv", b"x\n")
    ws.write_bytes("tmp/scratch.txt", b"x")
    ws.write_bytes("memory/notes.md", b"x")

    assert changed_since(ws, before) == ["artifacts/charts/revenue.png", "artifacts/edited.csv"]


def test_a_rewrite_with_the_same_size_counts_by_its_mtime(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path / "ws")
    path = ws.write_bytes("artifacts/result.txt", b"draft")
    before = snapshot(ws)
    stat = path.stat()

    path.write_bytes(b"final")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))

    assert changed_since(ws, before) == ["artifacts/result.txt"]


def test_snapshot_records_size_and_mtime_and_accepts_a_plain_path(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path / "ws")
    path = ws.write_bytes("artifacts/a.txt", b"12345")
    assert snapshot(ws.root) == {"artifacts/a.txt": (5, path.stat().st_mtime_ns)}
    assert changed_since(ws.root, {}) == ["artifacts/a.txt"]


def test_artifact_symlinks_pointing_outside_are_not_reported(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path / "ws")
    (tmp_path / "host.txt").write_text("host file")
    before = snapshot(ws)
    (ws.artifacts_dir / "link.txt").symlink_to(tmp_path / "host.txt")
    assert changed_since(ws, before) == []


def test_missing_artifacts_dir_gives_an_empty_snapshot(tmp_path: Path) -> None:
    assert snapshot(tmp_path) == {}
