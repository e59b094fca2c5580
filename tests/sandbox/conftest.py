from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.sandbox.base import SandboxSpec
from fleet_rlm.sandbox.local import LocalSandboxBackend
from fleet_rlm.sandbox.local_sandbox import LocalSandbox
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.tree import SHARED_DIR_MODE

from .helpers import TEST_LIMITS, RecordingObserver, SandboxMaker


@pytest.fixture
def scripted_server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture
def backend() -> LocalSandboxBackend:
    return LocalSandboxBackend(interrupt_grace=0.5)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return Workspace.create(tmp_path / "workspace", mode=SHARED_DIR_MODE).root


@pytest.fixture
def observer() -> RecordingObserver:
    return RecordingObserver()


@pytest.fixture
def make_sandbox(backend: LocalSandboxBackend, workspace: Path, observer: RecordingObserver) -> Iterator[SandboxMaker]:
    made: list[LocalSandbox] = []

    def make(**limits: Any) -> LocalSandbox:
        spec = SandboxSpec(workspace, limits=dataclasses.replace(TEST_LIMITS, **limits), observer=observer)
        sandbox = backend.create(spec)
        made.append(sandbox)
        return sandbox

    yield make
    for sandbox in made:
        sandbox.shutdown()


@pytest.fixture
def sandbox(make_sandbox: SandboxMaker) -> LocalSandbox:
    return make_sandbox()
