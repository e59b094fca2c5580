"""Input variables: JSON values the host passes, bound as globals of the code."""

from __future__ import annotations

import math

import pytest
from dspy.primitives import CodeInterpreter, CodeInterpreterError

from .conftest import InterpreterMaker

JSON_VALUES = [
    None,
    True,
    False,
    0,
    -7,
    2**62,
    2**100,
    3.25,
    -0.5,
    "",
    "plain text",
    "héllo — 你好 — 🎉 — e\u0301",  # accents, CJK, emoji, a combining mark
    "NUL\x00 and zero\u200bwidth",
    'line\nbreak\ttab "quote" \\ backslash',
    "\ud800 a lone surrogate",
    [],
    {},
    [1, "two", 3.0, None, [True]],
    {"key": {"nested": [1, {"deeper": "yes"}]}, "ünï": "çødé"},
]


@pytest.mark.parametrize("value", JSON_VALUES, ids=repr)
def test_every_json_value_arrives_as_it_was_sent(interpreter: CodeInterpreter, value: object) -> None:
    assert interpreter.execute("value", variables={"value": value}) == value
    assert interpreter.execute("type(value).__name__", variables={"value": value}) == type(value).__name__


def test_a_large_string_arrives_whole(interpreter: CodeInterpreter) -> None:
    large = "0123456789abcdé\n" * 400_000  # 6.4 M characters
    variables = {"large": large}
    assert interpreter.execute("len(large), large[-17:], large.count('é')", variables) == [
        len(large),
        large[-17:],
        400_000,
    ]
    assert interpreter.execute("large == received", {**variables, "received": large}) is True


@pytest.mark.not_supported_by(
    "dspy-local", reason="LocalInterpreter sends strict JSON (allow_nan=False), which has no NaN or infinity"
)
def test_nan_and_infinity_arrive_as_floats(interpreter: CodeInterpreter) -> None:
    variables = {"values": [math.nan, math.inf, -math.inf], "one": math.nan}
    result = interpreter.execute("import math\n[math.isnan(values[0]), values[1:], math.isnan(one)]", variables)
    assert result == [True, [math.inf, -math.inf], True]


def test_variables_persist_and_are_rebound_at_each_execution(interpreter: CodeInterpreter) -> None:
    variables = {"items": [1, 2, 3]}
    assert interpreter.execute("items.append(4)\nlen(items)", variables) == 4
    assert interpreter.execute("len(items)", variables) == 3  # sent again: the value sent, not the mutated one
    assert interpreter.execute("len(items)") == 3  # not sent: the global stays
    assert interpreter.execute("items", {"items": ["new"]}) == ["new"]


@pytest.mark.parametrize(
    "variables", [{"class": 1}, {"SUBMIT": 1}, {"__builtins__": {}}, {"tool": 1}, {"not-valid": 1}]
)
def test_invalid_variable_names_are_refused_without_spending_the_session(
    make_interpreter: InterpreterMaker, variables: dict[str, object]
) -> None:
    interpreter = make_interpreter(tools={"tool": lambda: "tool"})
    with pytest.raises(CodeInterpreterError, match="invalid names"):
        interpreter.execute("1", variables)
    assert interpreter.execute("tool()") == "tool"


def test_a_value_that_is_not_json_is_refused_without_spending_the_session(interpreter: CodeInterpreter) -> None:
    interpreter.execute("kept = 1")
    with pytest.raises(CodeInterpreterError, match="JSON"):
        interpreter.execute("1", {"thing": object()})
    assert interpreter.execute("kept") == 1


@pytest.mark.not_supported_by("dspy-local", reason="bytes are not JSON: LocalInterpreter refuses them")
def test_bytes_arrive_as_bytes(interpreter: CodeInterpreter) -> None:
    assert interpreter.execute("type(blob).__name__, len(blob)", {"blob": bytes(range(256))}) == ["bytes", 256]
