"""Choosing the sandbox backend by name (``sandbox_backend``), and the one factory every sandbox is made by."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet_rlm.config import ConfigError, Settings
from fleet_rlm.sandbox import registry
from fleet_rlm.sandbox.base import Sandbox, SandboxFactory, SandboxSpec
from fleet_rlm.sandbox.local import LocalSandboxBackend
from fleet_rlm.sandbox.registry import UnknownSandboxBackend, configured_backend
from fleet_rlm.testing.backends import SeamRecordingBackend

from .helpers import TEST_LIMITS


def test_the_local_backend_is_the_default_and_takes_its_settings(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, sandbox_allow_unisolated=True, sandbox_require_limits=True)
    assert settings.sandbox.backend == "local"

    backend = configured_backend(settings)

    assert isinstance(backend, LocalSandboxBackend)
    assert backend.allow_unisolated is True and backend.require_limits is True


def test_an_unknown_backend_is_refused_with_its_name_and_the_known_ones(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, sandbox_backend="daytona")

    with pytest.raises(UnknownSandboxBackend) as caught:
        configured_backend(settings)

    assert isinstance(caught.value, ConfigError)
    assert "unknown sandbox backend 'daytona'" in str(caught.value)
    assert "known backends: local" in str(caught.value)


def test_a_backend_added_to_the_registry_is_chosen_by_its_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(registry.BACKENDS, "local-recording", lambda: SeamRecordingBackend)
    settings = Settings(home=tmp_path, sandbox_backend="local-recording", sandbox_allow_unisolated=True)

    backend = configured_backend(settings)

    assert isinstance(backend, SeamRecordingBackend) and backend.allow_unisolated is True
    assert "local-recording" in str(UnknownSandboxBackend("x"))


def test_the_factory_makes_no_sandbox_once_its_admission_refuses(backend: LocalSandboxBackend, workspace: Path) -> None:
    told: list[Sandbox] = []
    refusing = False

    def admit() -> None:
        if refusing:
            raise RuntimeError("the turn was cancelled")

    factory = SandboxFactory(backend, SandboxSpec(workspace, limits=TEST_LIMITS), admit=admit, on_create=told.append)
    first = factory()
    try:
        assert factory.execution_instructions == backend.execution_instructions
        assert first.execute("print(6 * 7)").strip() == "42"
        refusing = True
        with pytest.raises(RuntimeError, match="cancelled"):
            factory()
        assert factory.created == told == [first]
    finally:
        first.shutdown()
