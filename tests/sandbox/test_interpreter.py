"""``FleetInterpreter``: the public DSPy interpreter over a Fleet sandbox (its own behaviour; what it
shares with DSPy's interpreters is in tests/dspy_conformance)."""

from __future__ import annotations

from pathlib import Path

import dspy
import pytest

import fleet_rlm
from fleet_rlm.config import ConfigError, Settings
from fleet_rlm.sandbox import registry
from fleet_rlm.sandbox.base import Sandbox, SandboxBackend, SandboxSpec
from fleet_rlm.sandbox.interpreter import FleetInterpreter


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.model_validate({"home": tmp_path / "home", "execution_timeout": 7})


def test_it_is_fleet_rlms_public_interpreter_and_a_dspy_one(settings: Settings) -> None:
    assert fleet_rlm.FleetInterpreter is FleetInterpreter
    interpreter = FleetInterpreter(settings=settings)
    assert isinstance(interpreter, dspy.CodeInterpreter)
    assert interpreter.spec.limits.execution_timeout == 7  # the settings' limits
    assert FleetInterpreter(settings=settings, execution_timeout=2).spec.limits.execution_timeout == 2
    with pytest.raises(AttributeError):
        _ = fleet_rlm.NoSuchThing  # type: ignore[attr-defined]


def test_its_own_workspace_is_private_and_removed_at_shutdown(settings: Settings) -> None:
    with FleetInterpreter(settings=settings) as interpreter:
        assert interpreter.isolated
        assert interpreter.execute("import os\nopen('note.txt', 'w').write('x')\nos.getcwd()") == "/workspace"
        workspace = interpreter.spec.workspace
        assert (workspace / "note.txt").read_text() == "x"
    assert not workspace.exists()


def test_a_given_workspace_is_worked_in_and_kept(settings: Settings, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o777)
    data.chmod(0o777)  # as root, the code runs as a uid of its own
    (data / "sales.csv").write_text("region,total\nnorth,3\n")
    with FleetInterpreter(workspace=data, settings=settings) as interpreter:
        assert interpreter.execute("open('sales.csv').read().splitlines()[1]") == "north,3"
        interpreter.execute("open('summary.txt', 'w').write('north leads')")
    assert (data / "summary.txt").read_text() == "north leads"
    with pytest.raises(NotADirectoryError):
        FleetInterpreter(workspace=tmp_path / "missing", settings=settings)


def test_a_factory_carries_its_options_and_the_instructions(settings: Settings, tmp_path: Path) -> None:
    factory = FleetInterpreter.factory(execution_timeout=3, workspace=tmp_path, settings=settings)
    assert factory.execution_instructions == FleetInterpreter.execution_instructions
    assert "trailing expression is the execution's result" in factory.execution_instructions
    assert "installed packages" in factory.execution_instructions
    interpreter = factory()
    assert isinstance(interpreter, FleetInterpreter) and interpreter is not factory()
    assert interpreter.spec.limits.execution_timeout == 3 and interpreter.spec.workspace == tmp_path.resolve()


def test_it_refuses_bad_options_before_starting_anything(settings: Settings) -> None:
    with pytest.raises(ValueError, match="execution_timeout"):
        FleetInterpreter(execution_timeout=0, settings=settings)
    with pytest.raises(ValueError, match="invalid names"):
        FleetInterpreter(tools={"SUBMIT": print}, settings=settings)


def test_it_runs_only_on_the_local_backend(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    class Elsewhere(SandboxBackend):
        name = "elsewhere"

        def create(self, spec: SandboxSpec) -> Sandbox:
            raise AssertionError("never called")

    monkeypatch.setitem(registry.BACKENDS, "elsewhere", lambda: Elsewhere)
    with pytest.raises(ConfigError, match="local sandbox backend"):
        FleetInterpreter(settings=settings.with_values({"sandbox_backend": "elsewhere"}))
