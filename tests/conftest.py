from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_rlm.config import Settings
from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.sandbox.environment import BuildProgress, EnvironmentSpec, ensure_environment
from fleet_rlm.testing.settings import SettingsFactory, scripted_settings


def pytest_sessionstart() -> None:
    """Build the sandbox environment before any test (.ci/run has already; a fresh checkout has not),
    so that no test's timeout covers the build."""

    def report(step: BuildProgress) -> None:
        print(f"sandbox environment [{step.done}/{step.total}]: {step.message}", flush=True)

    ensure_environment(EnvironmentSpec(), report)


@pytest.fixture
def model_server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(stream_chunk_chars=12) as server:
        yield server


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "fleet-home"
    path.mkdir()
    return path


@pytest.fixture
def make_settings(model_server: ScriptedModelServer, home: Path, settings_defaults: dict[str, Any]) -> SettingsFactory:
    """Settings on the scripted model: the directory's ``settings_defaults``, then the test's overrides."""

    def make(**overrides: Any) -> Settings:
        return scripted_settings(model_server, home, **{**settings_defaults, **overrides})

    return make
