"""DSPy's interpreter callbacks: ``on_interpreter_{startup,execute,tool_call,shutdown}_{start,end}``,
with the inputs and outputs DSPy's own interpreters pass, for instance-level and configured callbacks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import dspy
import pytest
from dspy.primitives import CodeExecutionError, CodeInterpreter, FinalOutput
from dspy.utils import BaseCallback

from .conftest import InterpreterMaker


@dataclass
class Event:
    hook: str
    call_id: str
    instance: Any = None
    inputs: dict[str, Any] | None = None
    outputs: Any = None
    exception: BaseException | None = None


@dataclass
class Recorder(BaseCallback):  # type: ignore[misc]
    events: list[Event] = field(default_factory=list)

    def hooks(self) -> list[str]:
        return [event.hook for event in self.events]

    def of(self, hook: str) -> list[Event]:
        return [event for event in self.events if event.hook == hook]

    def _start(self, hook: str, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self.events.append(Event(hook, call_id, instance=instance, inputs=inputs))

    def _end(self, hook: str, call_id: str, outputs: Any, exception: BaseException | None) -> None:
        self.events.append(Event(hook, call_id, outputs=outputs, exception=exception))

    def on_interpreter_startup_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self._start("startup_start", call_id, instance, inputs)

    def on_interpreter_startup_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
        self._end("startup_end", call_id, outputs, exception)

    def on_interpreter_execute_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self._start("execute_start", call_id, instance, inputs)

    def on_interpreter_execute_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
        self._end("execute_end", call_id, outputs, exception)

    def on_interpreter_tool_call_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self._start("tool_call_start", call_id, instance, inputs)

    def on_interpreter_tool_call_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
        self._end("tool_call_end", call_id, outputs, exception)

    def on_interpreter_shutdown_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self._start("shutdown_start", call_id, instance, inputs)

    def on_interpreter_shutdown_end(self, call_id: str, outputs: Any, exception: BaseException | None = None) -> None:
        self._end("shutdown_end", call_id, outputs, exception)


def add(left: int, right: int) -> int:
    return left + right


def test_a_session_fires_every_hook_in_order(make_interpreter: InterpreterMaker) -> None:
    recorder = Recorder()
    interpreter = make_interpreter(tools={"add": add}, callbacks=[recorder])
    assert interpreter.execute("add(19, right=23)", {"unused": [1]}) == 42
    interpreter.shutdown()

    assert recorder.hooks() == [
        "execute_start",
        "startup_start",  # started lazily, by the first execution
        "startup_end",
        "tool_call_start",
        "tool_call_end",
        "execute_end",
        "shutdown_start",
        "shutdown_end",
    ]
    execute_start, startup_start, _, tool_start, tool_end, execute_end, shutdown_start, _ = recorder.events
    assert execute_start.inputs == {"code": "add(19, right=23)", "variables": {"unused": [1]}}
    assert startup_start.inputs == {} and shutdown_start.inputs == {}
    assert tool_start.inputs == {"tool_name": "add", "args": [19], "kwargs": {"right": 23}}
    assert tool_end.outputs == 42 and tool_end.exception is None
    assert execute_end.outputs == 42 and execute_end.exception is None
    assert all(event.instance is interpreter for event in recorder.events if event.hook.endswith("_start"))
    # Each start is paired with its end by call id; every call has its own.
    for hook in ("startup", "execute", "tool_call", "shutdown"):
        [start], [end] = recorder.of(f"{hook}_start"), recorder.of(f"{hook}_end")
        assert start.call_id == end.call_id
    assert len({event.call_id for event in recorder.events}) == 4


def test_an_explicit_start_fires_the_startup_hooks_once(make_interpreter: InterpreterMaker) -> None:
    recorder = Recorder()
    interpreter = make_interpreter(callbacks=[recorder])
    interpreter.start()
    interpreter.execute("x = 1", None)
    interpreter.execute("x")
    assert recorder.hooks() == ["startup_start", "startup_end", *["execute_start", "execute_end"] * 2]
    assert [event.inputs for event in recorder.of("execute_start")] == [
        {"code": "x = 1", "variables": None},
        {"code": "x", "variables": None},
    ]
    assert [event.outputs for event in recorder.of("execute_end")] == [None, 1]


def test_failures_reach_the_end_hooks(make_interpreter: InterpreterMaker) -> None:
    def refuse() -> None:
        raise ValueError("no")

    recorder = Recorder()
    interpreter = make_interpreter(tools={"refuse": refuse}, callbacks=[recorder])
    with pytest.raises(CodeExecutionError):
        interpreter.execute("refuse()")
    with pytest.raises(SyntaxError):
        interpreter.execute("x = (")

    [tool_end] = recorder.of("tool_call_end")
    assert tool_end.outputs is None and isinstance(tool_end.exception, ValueError)
    failed, syntax = recorder.of("execute_end")
    assert failed.outputs is None and isinstance(failed.exception, CodeExecutionError)
    assert syntax.outputs is None and isinstance(syntax.exception, SyntaxError)


def test_a_submission_is_the_executions_output(make_interpreter: InterpreterMaker) -> None:
    recorder = Recorder()
    make_interpreter(callbacks=[recorder]).execute("SUBMIT('done')")
    [end] = recorder.of("execute_end")
    assert end.outputs == FinalOutput({"output": "done"})


def test_callbacks_configured_in_dspy_fire_too(interpreter: CodeInterpreter) -> None:
    interpreter.tools["add"] = add
    recorder = Recorder()
    with dspy.context(callbacks=[recorder]):
        interpreter.execute("add(1, 2)")
    assert recorder.hooks() == [
        "execute_start",
        "startup_start",
        "startup_end",
        "tool_call_start",
        "tool_call_end",
        "execute_end",
    ]
    interpreter.execute("add(3, 4)")  # outside the context: not seen
    assert len(recorder.events) == 6


def test_a_failing_callback_does_not_stop_the_interpreter(make_interpreter: InterpreterMaker) -> None:
    class Broken(BaseCallback):  # type: ignore[misc]
        def on_interpreter_execute_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
            raise RuntimeError("broken callback")

    assert make_interpreter(callbacks=[Broken()]).execute("6 * 7") == 42
