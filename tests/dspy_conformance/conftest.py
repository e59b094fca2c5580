"""The conformance suite: the same checks against Fleet's interpreter and DSPy's ``LocalInterpreter``.

Every test takes ``make_interpreter`` (or ``interpreter``), parametrized over both. A case one of them
does not meet on purpose carries ``@pytest.mark.not_supported_by(name, reason=...)``: it runs there
as a strict xfail, so the suite notices when that changes. Fleet's deliberate differences are listed
in docs/dspy.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.primitives import CodeInterpreter

from fleet_rlm import FleetInterpreter
from fleet_rlm.config import Settings
from fleet_rlm.sandbox.local import LocalSandboxBackend

FLEET = "fleet"
DSPY_LOCAL = "dspy-local"
DEFAULT_TIMEOUT = 10.0

InterpreterMaker = Callable[..., CodeInterpreter]
"""``make_interpreter(tools=..., output_fields=..., execution_timeout=..., callbacks=...)``, as
``dspy.LocalInterpreter`` takes them; each interpreter made is shut down after the test."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "not_supported_by(name, reason): the interpreter `name` (fleet, dspy-local) does not do this on purpose",
    )


@pytest.fixture(scope="session")
def fleet_backend() -> LocalSandboxBackend:
    return LocalSandboxBackend(interrupt_grace=0.5)


@pytest.fixture
def fleet_settings(tmp_path: Path) -> Settings:
    return Settings.model_validate({"home": tmp_path / "fleet-home"})  # no environment or file is read


@pytest.fixture(params=[FLEET, DSPY_LOCAL])
def interpreter_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    for marker in request.node.iter_markers("not_supported_by"):
        if marker.args[0] == name:
            request.applymarker(pytest.mark.xfail(strict=True, reason=marker.kwargs["reason"]))
    return name


@pytest.fixture
def make_interpreter(
    interpreter_name: str, fleet_settings: Settings, fleet_backend: LocalSandboxBackend
) -> Iterator[InterpreterMaker]:
    made: list[CodeInterpreter] = []

    def make(**options: Any) -> CodeInterpreter:
        options.setdefault("execution_timeout", DEFAULT_TIMEOUT)
        interpreter: CodeInterpreter
        if interpreter_name == FLEET:
            interpreter = FleetInterpreter(settings=fleet_settings, backend=fleet_backend, **options)
        else:
            interpreter = dspy.LocalInterpreter(**options)
        made.append(interpreter)
        return interpreter

    yield make
    for interpreter in made:
        interpreter.shutdown()


@pytest.fixture
def interpreter(make_interpreter: InterpreterMaker) -> CodeInterpreter:
    return make_interpreter()


@pytest.fixture
def interpreter_factory(
    interpreter_name: str, fleet_settings: Settings, fleet_backend: LocalSandboxBackend
) -> Callable[[], CodeInterpreter]:
    """What ``dspy.RLM`` and ``dspy.Flex`` take as ``interpreter_factory``."""
    if interpreter_name == FLEET:
        return FleetInterpreter.factory(settings=fleet_settings, backend=fleet_backend)
    return dspy.LocalInterpreter
