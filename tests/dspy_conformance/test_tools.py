"""Host tools: functions of the host the code calls by name, with positional or keyword arguments."""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable
from typing import Any

import pytest
from dspy.primitives import CodeExecutionError, CodeInterpreter

from .conftest import InterpreterMaker


def add(left: int, right: int) -> int:
    return left + right


def test_tools_take_positional_and_keyword_arguments(make_interpreter: InterpreterMaker) -> None:
    interpreter = make_interpreter(tools={"add": add, "total": lambda *values: sum(values)})
    assert interpreter.execute("add(19, 23)") == 42
    assert interpreter.execute("add(left=19, right=23)") == 42
    assert interpreter.execute("add(19, right=23)") == 42
    assert interpreter.execute("total(1, 2, 3)") == 6


def test_keyword_only_tools(make_interpreter: InterpreterMaker) -> None:
    interpreter = make_interpreter(tools={"add": lambda *, left, right: left + right})
    assert interpreter.execute("add(left=1, right=2)") == 3


@pytest.mark.parametrize("value", [None, "text", 3.5, [1, [2]], {"nested": {"ok": True}}])
def test_tool_results_reach_the_code_as_json(make_interpreter: InterpreterMaker, value: object) -> None:
    interpreter = make_interpreter(tools={"give": lambda: value})
    assert interpreter.execute("result = give()\nresult") == value
    assert interpreter.execute("type(result).__name__") == type(value).__name__


def test_a_failing_tool_is_a_runtime_error_in_the_code(make_interpreter: InterpreterMaker) -> None:
    def refuse(reason: str) -> None:
        raise ValueError(reason)

    interpreter = make_interpreter(tools={"refuse": refuse})
    caught = "try:\n    refuse('bad input')\nexcept RuntimeError as exc:\n    message = str(exc)\nmessage"
    assert interpreter.execute(caught) == "ValueError: bad input"
    with pytest.raises(CodeExecutionError, match="RuntimeError: ValueError: bad input"):
        interpreter.execute("refuse('bad input')")
    assert interpreter.execute("'still running'") == "still running"


def test_async_tools_are_awaited(make_interpreter: InterpreterMaker) -> None:
    async def add_later(left: int, right: int) -> int:
        return left + right

    assert make_interpreter(tools={"add": add_later}).execute("add(left=19, right=23)") == 42


def test_tools_run_in_the_callers_context(make_interpreter: InterpreterMaker) -> None:
    marker = contextvars.ContextVar("marker", default="missing")
    marker.set("visible")  # as dspy.context(...) sets what a tool such as llm_query reads
    assert make_interpreter(tools={"read": marker.get}).execute("read()") == "visible"


def test_tools_can_be_added_and_removed_after_creation(interpreter: CodeInterpreter) -> None:
    interpreter.tools["late"] = lambda: "added"  # what dspy.RLM and dspy.Flex do
    assert interpreter.execute("late()") == "added"
    del interpreter.tools["late"]
    with pytest.raises(CodeExecutionError, match="NameError"):
        interpreter.execute("late()")


def test_tools_can_be_called_from_several_threads(make_interpreter: InterpreterMaker) -> None:
    interpreter = make_interpreter(tools={"square": lambda n: n * n})
    code = "from concurrent.futures import ThreadPoolExecutor\nwith ThreadPoolExecutor(4) as pool:\n"
    code += "    squares = list(pool.map(square, range(8)))\nsquares"
    assert interpreter.execute(code) == [n * n for n in range(8)]


def test_arguments_and_results_must_be_json(make_interpreter: InterpreterMaker) -> None:
    interpreter = make_interpreter(tools={"echo": lambda value: value, "make": lambda: object()})
    with pytest.raises(CodeExecutionError, match="TypeError"):
        interpreter.execute("echo(object())")
    with pytest.raises(CodeExecutionError, match=r"RuntimeError: TypeError: .*JSON"):
        interpreter.execute("make()")
    assert interpreter.execute("echo([1])") == [1]


@pytest.mark.parametrize("name", ["not-valid", "class", "SUBMIT", "__builtins__"])
def test_invalid_tool_names_are_refused_without_spending_the_session(
    make_interpreter: InterpreterMaker, name: str
) -> None:
    with pytest.raises(ValueError, match="invalid names"):
        make_interpreter(tools={name: lambda: 1})
    interpreter = make_interpreter()
    interpreter.tools[name] = lambda: 1
    with pytest.raises(ValueError, match="invalid names"):
        interpreter.execute("1")
    del interpreter.tools[name]
    assert interpreter.execute("6 * 7") == 42


def keyword_wrapped(function: Callable[..., Any]) -> Callable[..., Any]:
    """A tool as dspy.RLM hands user tools over: ``invoke(**kwargs)`` with the function's signature."""

    @functools.wraps(function)
    def invoke(**kwargs: Any) -> Any:
        return function(**kwargs)

    invoke.__signature__ = inspect.signature(function)  # type: ignore[attr-defined]
    return invoke


@pytest.mark.not_supported_by(
    "dspy-local",
    reason="LocalInterpreter passes positional arguments through as they are, so a tool dspy.RLM wrapped "
    "as invoke(**kwargs) can only be called by keyword",
)
def test_a_keyword_wrapped_tool_takes_positional_arguments(make_interpreter: InterpreterMaker) -> None:
    assert make_interpreter(tools={"add": keyword_wrapped(add)}).execute("add(19, 23)") == 42


def test_an_unknown_tool_is_not_callable(interpreter: CodeInterpreter) -> None:
    with pytest.raises(CodeExecutionError, match="NameError"):
        interpreter.execute("nothing_here()")
