"""The local backend's push/pull seam: files into a sandbox's workspace and back out, with a real
sandbox on the other side."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from fleet_rlm.sandbox.local import LocalSandboxBackend
from fleet_rlm.sandbox.local_sandbox import LocalSandbox


def test_a_pushed_file_is_read_by_sandbox_code_and_what_it_writes_is_pulled_back(
    backend: LocalSandboxBackend, workspace: Path, sandbox: LocalSandbox, tmp_path: Path
) -> None:
    source = tmp_path / "input.csv"
    source.write_text("a,b\n1,2\n3,4\n")
    files = backend.workspace_files(workspace)

    assert files.push(source, "files/data/input.csv") == 12
    sandbox.execute(
        "import os\nrows = open('files/data/input.csv').read().splitlines()\n"
        "os.makedirs('artifacts/out', exist_ok=True)\nopen('artifacts/out/count.txt', 'w').write(str(len(rows)))"
    )
    pulled = tmp_path / "count.txt"

    assert files.pull("artifacts/out/count.txt", pulled, limit=1024) == 1
    assert pulled.read_text() == "3"


def test_sandbox_code_may_change_a_pushed_file_and_a_second_push_replaces_it(
    backend: LocalSandboxBackend, workspace: Path, sandbox: LocalSandbox, tmp_path: Path
) -> None:
    files = backend.workspace_files(workspace)
    files.push(io.BytesIO(b"first"), "memory/notes.txt")

    sandbox.execute("open('memory/notes.txt', 'a').write(' and more')")  # as root: a uid of its own
    files.pull("memory/notes.txt", tmp_path / "notes.txt", limit=1024)
    assert (tmp_path / "notes.txt").read_bytes() == b"first and more"

    files.push(io.BytesIO(b"second"), "memory/notes.txt")
    assert sandbox.execute("print(open('memory/notes.txt').read())").strip() == "second"


def test_a_failed_pull_leaves_the_host_destination_as_it_was(
    backend: LocalSandboxBackend, workspace: Path, tmp_path: Path
) -> None:
    files = backend.workspace_files(workspace)
    destination = tmp_path / "out"
    destination.mkdir()
    kept = destination / "kept.txt"
    kept.write_text("mine")

    with pytest.raises(FileNotFoundError):
        files.pull("artifacts/missing.txt", kept, limit=1024)

    assert kept.read_text() == "mine"
    assert [p.name for p in destination.iterdir()] == ["kept.txt"]
