"""The push/pull seam against sandbox code that plants links and FIFOs where the host pulls or pushes.

The host must never follow a link out of the workspace, never block on a FIFO, and never write
through a link; the host file it pulls into keeps its old content when the pull is refused.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet_rlm.sandbox.base import SandboxSpec, WorkspaceFiles
from fleet_rlm.sandbox.local import LocalSandboxBackend
from fleet_rlm.sandbox.local_sandbox import LocalSandbox
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.tree import SHARED_DIR_MODE, UnsafeEntry
from tests.sandbox.helpers import TEST_LIMITS

from .conftest import HostCanary


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return Workspace.create(tmp_path / "workspace", mode=SHARED_DIR_MODE).root


@pytest.fixture
def sandbox(workspace: Path) -> Iterator[LocalSandbox]:
    made = LocalSandboxBackend(interrupt_grace=0.5).create(SandboxSpec(workspace, limits=TEST_LIMITS))
    yield made
    made.shutdown()


@pytest.fixture
def files(workspace: Path) -> WorkspaceFiles:
    return LocalSandboxBackend(interrupt_grace=0.5).workspace_files(workspace)


@pytest.fixture
def destination(tmp_path: Path) -> Path:
    """A host file a pull would replace."""
    path = tmp_path / "host" / "pulled.txt"
    path.parent.mkdir()
    path.write_text("the host's own")
    return path


def test_a_link_planted_by_sandbox_code_is_not_followed_on_pull(
    sandbox: LocalSandbox, files: WorkspaceFiles, destination: Path, canary: HostCanary
) -> None:
    sandbox.execute(f"import os\nos.symlink({str(canary.secret)!r}, 'artifacts/report.txt')")

    with pytest.raises(UnsafeEntry, match="symbolic link"):
        files.pull("artifacts/report.txt", destination, limit=1024)

    assert destination.read_text() == "the host's own"
    assert [p.name for p in destination.parent.iterdir()] == ["pulled.txt"]
    canary.untouched()
    canary.absent_from(trees=[destination.parent])


def test_a_directory_swapped_for_a_link_by_sandbox_code_is_not_followed_either_way(
    sandbox: LocalSandbox, files: WorkspaceFiles, destination: Path, canary: HostCanary, tmp_path: Path
) -> None:
    sandbox.execute(
        f"import os, shutil\nshutil.rmtree('artifacts')\nos.symlink({str(canary.directory)!r}, 'artifacts')"
    )
    source = tmp_path / "sitecustomize.py"
    source.write_text("PWNED = True")

    with pytest.raises(UnsafeEntry):
        files.pull("artifacts/secret.txt", destination, limit=1024)
    with pytest.raises(UnsafeEntry):
        files.push(source, "artifacts/sitecustomize.py")

    assert destination.read_text() == "the host's own"
    canary.untouched()


def test_a_fifo_planted_by_sandbox_code_is_neither_waited_on_nor_read_on_pull(
    sandbox: LocalSandbox, files: WorkspaceFiles, destination: Path
) -> None:
    sandbox.execute("import os\nos.mkfifo('artifacts/pipe')")
    raised: list[BaseException] = []

    def pull() -> None:
        try:
            files.pull("artifacts/pipe", destination, limit=1024)
        except BaseException as exc:
            raised.append(exc)

    puller = threading.Thread(target=pull, daemon=True)
    puller.start()
    puller.join(5)

    assert not puller.is_alive(), "the pull blocked on the FIFO"
    [error] = raised
    assert isinstance(error, UnsafeEntry) and "a FIFO" in str(error)
    assert destination.read_text() == "the host's own"


def test_a_push_over_a_link_planted_by_sandbox_code_replaces_the_link(
    sandbox: LocalSandbox, files: WorkspaceFiles, workspace: Path, canary: HostCanary, tmp_path: Path
) -> None:
    sandbox.execute(f"import os\nos.symlink({str(canary.secret)!r}, 'files/input.csv')")
    source = tmp_path / "input.csv"
    source.write_text("x\n1\n")

    files.push(source, "files/input.csv")

    pushed = workspace / "files" / "input.csv"
    assert not pushed.is_symlink() and pushed.read_text() == "x\n1\n"
    canary.untouched()
