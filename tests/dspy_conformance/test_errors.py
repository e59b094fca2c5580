"""Errors: ``SyntaxError`` and ``CodeExecutionError`` are the code's own and the session goes on;
a bare ``CodeInterpreterError`` is the interpreter's (bad setup, a dead worker) and ends it."""

from __future__ import annotations

import pytest
from dspy.primitives import CodeExecutionError, CodeInterpreter, CodeInterpreterError


def test_invalid_syntax_is_a_syntax_error_and_the_session_goes_on(interpreter: CodeInterpreter) -> None:
    interpreter.execute("kept = 'before'")
    with pytest.raises(SyntaxError, match="never closed"):
        interpreter.execute("x = (")
    with pytest.raises(SyntaxError):
        interpreter.execute("if")
    assert interpreter.execute("kept") == "before"


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("1 / 0", "ZeroDivisionError: division by zero"),
        ("undefined_name", "NameError: name 'undefined_name' is not defined"),
        ("{}['key']", "KeyError: 'key'"),
        ("raise ValueError('bad value')", "ValueError: bad value"),
        ("class Boom(Exception):\n    pass\nraise Boom('custom')", "Boom: custom"),
    ],
)
def test_a_runtime_error_names_its_type_and_message(interpreter: CodeInterpreter, code: str, line: str) -> None:
    with pytest.raises(CodeExecutionError) as caught:
        interpreter.execute(code)
    assert line in str(caught.value).splitlines()  # DSPy's wording; an interpreter may add context around it


def test_after_a_runtime_error_the_state_is_kept(interpreter: CodeInterpreter) -> None:
    with pytest.raises(CodeExecutionError):
        interpreter.execute("done = 'before the error'\n1 / 0\nnever = True")
    assert interpreter.execute("done") == "before the error"
    with pytest.raises(CodeExecutionError, match="NameError"):
        interpreter.execute("never")


@pytest.mark.parametrize(
    ("code", "name"), [("raise SystemExit(3)", "SystemExit"), ("raise KeyboardInterrupt", "KeyboardInterrupt")]
)
def test_exiting_exceptions_of_the_code_are_runtime_errors(interpreter: CodeInterpreter, code: str, name: str) -> None:
    with pytest.raises(CodeExecutionError, match=name):
        interpreter.execute(code)
    assert interpreter.execute("'still here'") == "still here"


def test_a_dead_worker_is_an_interpreter_error_that_ends_the_session(interpreter: CodeInterpreter) -> None:
    interpreter.execute("kept = 1")
    with pytest.raises(CodeInterpreterError) as caught:
        interpreter.execute("import os\nos._exit(3)")
    assert not isinstance(caught.value, CodeExecutionError)
    with pytest.raises(CodeInterpreterError):
        interpreter.execute("kept")


def test_code_that_is_not_a_string_is_refused(interpreter: CodeInterpreter) -> None:
    with pytest.raises(CodeInterpreterError):
        interpreter.execute(b"1")  # type: ignore[arg-type]
    assert interpreter.execute("1") == 1
