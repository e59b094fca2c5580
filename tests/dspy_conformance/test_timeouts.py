"""``execution_timeout`` bounds one execution, the host tools it calls included."""

from __future__ import annotations

import threading
import time

import pytest
from dspy.primitives import CodeExecutionError, CodeInterpreterError

from .conftest import InterpreterMaker

TIMEOUT = 0.5
PROMPTLY = 5.0  # seconds within which a timed-out execution has returned, whatever it did


def test_an_execution_past_its_timeout_is_stopped(make_interpreter: InterpreterMaker) -> None:
    interpreter = make_interpreter(execution_timeout=TIMEOUT)
    started = time.monotonic()
    with pytest.raises(CodeInterpreterError, match="exceeded execution timeout"):
        interpreter.execute("import time\ntime.sleep(30)")
    assert time.monotonic() - started < PROMPTLY


def test_a_blocked_host_tool_does_not_hold_the_execution_past_its_timeout(make_interpreter: InterpreterMaker) -> None:
    called, release = threading.Event(), threading.Event()

    def blocked() -> int:
        called.set()
        release.wait(10)
        return 42

    interpreter = make_interpreter(tools={"blocked": blocked}, execution_timeout=TIMEOUT)
    started = time.monotonic()
    try:
        with pytest.raises(CodeInterpreterError, match="exceeded execution timeout"):
            interpreter.execute("blocked()")
        assert time.monotonic() - started < PROMPTLY
        assert called.is_set()
    finally:
        release.set()


def test_a_host_tool_within_the_timeout_finishes(make_interpreter: InterpreterMaker) -> None:
    def slow() -> int:
        time.sleep(0.1)
        return 42

    assert make_interpreter(tools={"slow": slow}, execution_timeout=2.0).execute("slow()") == 42


def test_code_that_ignores_the_interrupt_ends_the_session(make_interpreter: InterpreterMaker) -> None:
    interpreter = make_interpreter(execution_timeout=TIMEOUT)
    stubborn = "import time\nwhile True:\n    try:\n        time.sleep(1)\n    except BaseException:\n        pass"
    started = time.monotonic()
    with pytest.raises(CodeInterpreterError, match="exceeded execution timeout") as caught:
        interpreter.execute(stubborn)
    assert not isinstance(caught.value, CodeExecutionError)
    assert time.monotonic() - started < PROMPTLY
    with pytest.raises(CodeInterpreterError):
        interpreter.execute("1")


@pytest.mark.not_supported_by(
    "dspy-local", reason="LocalInterpreter cannot interrupt code: a timeout ends its worker and the session"
)
def test_a_timeout_is_recoverable_and_keeps_the_state(make_interpreter: InterpreterMaker) -> None:
    interpreter = make_interpreter(execution_timeout=TIMEOUT)
    interpreter.execute("kept = 'state'")
    with pytest.raises(CodeExecutionError, match="exceeded execution timeout"):
        interpreter.execute("import time\ntime.sleep(30)")
    assert interpreter.execute("kept") == "state"
