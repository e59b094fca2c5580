"""What the code may change stays its own: the names the interpreter provides come back at each
execution, changed builtins do not stop the interpreter, and nothing reaches the host's memory."""

from __future__ import annotations

from pathlib import Path

import pytest
from dspy.primitives import CodeInterpreter, FinalOutput

from .conftest import InterpreterMaker


def test_rebound_interpreter_names_come_back_at_the_next_execution(make_interpreter: InterpreterMaker) -> None:
    interpreter = make_interpreter(tools={"add": lambda left, right: left + right})
    interpreter.execute("SUBMIT = None\nadd = None\n__builtins__ = {}")
    assert interpreter.execute("len([1]) + add(19, 23)") == 43
    assert interpreter.execute("SUBMIT(42)") == FinalOutput({"output": 42})


@pytest.mark.not_supported_by(
    "fleet",
    reason="deliberate: the code's __builtins__ is the builtins module, as in a Python script (docs/dspy.md)",
)
def test_a_builtin_replaced_through_the_builtins_dict_comes_back(interpreter: CodeInterpreter) -> None:
    interpreter.execute("__builtins__['len'] = None")
    assert interpreter.execute("len([1])") == 1


@pytest.mark.not_supported_by(
    "dspy-local", reason="LocalInterpreter's own protocol code runs on the builtins the code changed"
)
def test_changed_builtins_do_not_stop_the_interpreter(make_interpreter: InterpreterMaker) -> None:
    interpreter = make_interpreter(tools={"add": lambda left, right: left + right})
    interpreter.execute("import builtins\nsaved = dict(vars(builtins))")
    interpreter.execute("builtins.isinstance = lambda *args: False\nbuiltins.len = None\nbuiltins.str = None")
    assert interpreter.execute("add(19, 23)") == 42
    assert interpreter.execute("SUBMIT('answered')") == FinalOutput({"output": "answered"})
    interpreter.execute("vars(builtins).update(saved)")
    assert interpreter.execute("len('abc')") == 3


def test_the_code_cannot_change_the_hosts_builtins(interpreter: CodeInterpreter) -> None:
    interpreter.execute("import builtins\nbuiltins.len = None\nbuiltins.FLEET_PROBE = 1")
    import builtins

    assert len([1]) == 1
    assert not hasattr(builtins, "FLEET_PROBE")


@pytest.mark.not_supported_by(
    "dspy-local", reason="LocalInterpreter is not a sandbox: the code has the host user's files and network"
)
def test_the_hosts_files_are_out_of_sight(interpreter: CodeInterpreter, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("not for the code")
    assert interpreter.execute("import os\nos.path.exists(secret)", {"secret": str(secret)}) is False
