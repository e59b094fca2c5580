"""What ``execute`` returns, and the lifecycle around it (DSPy's ``CodeInterpreter`` protocol).

A trailing expression's value is the result when it is not None (JSON-compatible values as they are,
others as their repr); otherwise what the code printed, or None. State persists between executions.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from dspy.primitives import CodeInterpreter, CodeInterpreterError

from .conftest import InterpreterMaker


def test_a_trailing_expression_is_the_result(interpreter: CodeInterpreter) -> None:
    assert interpreter.execute("6 * 7") == 42
    assert interpreter.execute("total = 20\ntotal + 22") == 42
    assert interpreter.execute("(\n    total\n    * 2\n)") == 40  # an expression over several lines


def test_without_a_trailing_value_the_printed_output_is_the_result(interpreter: CodeInterpreter) -> None:
    assert interpreter.execute("print('hello')") == "hello"
    assert interpreter.execute("print('a')\nprint('b')") == "a\nb"
    assert interpreter.execute("print('shown')\nNone") == "shown"
    assert interpreter.execute("x = 1") is None
    assert interpreter.execute("None") is None


def test_the_trailing_value_wins_over_printed_output(interpreter: CodeInterpreter) -> None:
    assert interpreter.execute("print('not the result')\n5") == 5


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("'text'", "text"),
        ("True", True),
        ("2.5", 2.5),
        ("[1, 'two', None]", [1, "two", None]),
        ("(1, 2)", [1, 2]),  # as JSON carries it
        ("{'a': {'b': [1, 2]}}", {"a": {"b": [1, 2]}}),
        ("{1, 2}", "{1, 2}"),  # not JSON: its repr
        ("b'raw'", "b'raw'"),
    ],
)
def test_values_come_back_as_json_or_as_their_repr(interpreter: CodeInterpreter, code: str, expected: object) -> None:
    assert interpreter.execute(code) == expected


def test_state_persists_between_executions(interpreter: CodeInterpreter) -> None:
    interpreter.execute("import math\ndef area(r):\n    return round(math.pi * r * r, 2)")
    interpreter.execute("radius = 2")
    assert interpreter.execute("area(radius)") == 12.57


def test_code_runs_in_another_process_and_its_output_stays_there(
    interpreter: CodeInterpreter, capfd: pytest.CaptureFixture[str]
) -> None:
    assert interpreter.execute("import os\nos.getpid()") != os.getpid()
    assert interpreter.execute("print('guest only')") == "guest only"
    captured = capfd.readouterr()
    assert "guest only" not in captured.out + captured.err


def test_calling_the_interpreter_executes(interpreter: CodeInterpreter) -> None:
    assert interpreter("1 + 1") == 2  # type: ignore[operator]


def test_start_is_idempotent_and_optional(make_interpreter: InterpreterMaker) -> None:
    started = make_interpreter()
    started.start()
    started.start()
    assert started.execute("'ready'") == "ready"
    assert make_interpreter().execute("'lazily started'") == "lazily started"


def test_a_shut_down_interpreter_refuses_to_run(make_interpreter: InterpreterMaker) -> None:
    interpreter = make_interpreter()
    interpreter.execute("x = 1")
    interpreter.shutdown()
    interpreter.shutdown()  # a second shutdown is harmless
    with pytest.raises(CodeInterpreterError, match="shut down"):
        interpreter.execute("x")


def test_it_is_a_context_manager(make_interpreter: InterpreterMaker) -> None:
    with make_interpreter() as interpreter:  # type: ignore[attr-defined]
        assert interpreter.execute("'inside'") == "inside"
    with pytest.raises(CodeInterpreterError):
        interpreter.execute("'after'")


def test_only_one_execution_runs_at_a_time(make_interpreter: InterpreterMaker) -> None:
    entered, release = threading.Event(), threading.Event()

    def hold() -> str:
        entered.set()
        release.wait(5)
        return "held"

    interpreter = make_interpreter(tools={"hold": hold})
    results: list[object] = []
    first = threading.Thread(target=lambda: results.append(interpreter.execute("hold()")))
    first.start()
    assert entered.wait(10)
    try:
        with pytest.raises(CodeInterpreterError, match="already has an active execution"):
            interpreter.execute("1")
    finally:
        release.set()
        first.join(10)
    assert results == ["held"]
    assert interpreter.execute("2") == 2


def test_an_interpreter_outlives_the_thread_that_started_it(interpreter: CodeInterpreter) -> None:
    starter = threading.Thread(target=lambda: interpreter.execute("kept = 'state'"))  # as dspy.Parallel's threads
    starter.start()
    starter.join(30)
    time.sleep(0.2)  # time for anything tied to the ended thread to go
    assert interpreter.execute("kept") == "state"


@pytest.mark.not_supported_by(
    "dspy-local", reason="LocalInterpreter ends the session when code leaves a thread running"
)
def test_a_thread_the_code_leaves_running_does_not_end_the_session(interpreter: CodeInterpreter) -> None:
    interpreter.execute("import threading, time\nstop = threading.Event()\nthreading.Thread(target=stop.wait).start()")
    assert interpreter.execute("stop.set()\n'still here'") == "still here"
