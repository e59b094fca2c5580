"""``SUBMIT`` ends an execution with a final answer: ``FinalOutput``, plain or typed by ``output_fields``."""

from __future__ import annotations

import pytest
from dspy.primitives import CodeExecutionError, CodeInterpreter, FinalOutput

from .conftest import InterpreterMaker

FIELDS = [{"name": "answer", "type": "str"}, {"name": "score", "type": "int"}]


def test_submit_without_output_fields_gives_one_value(interpreter: CodeInterpreter) -> None:
    assert interpreter.execute("SUBMIT({'total': 42})") == FinalOutput({"output": {"total": 42}})
    with pytest.raises(CodeExecutionError, match="TypeError"):
        interpreter.execute("SUBMIT(1, 2)")


def test_typed_submit_by_keyword_or_by_position(make_interpreter: InterpreterMaker) -> None:
    interpreter = make_interpreter(output_fields=FIELDS)
    result = interpreter.execute("SUBMIT(answer='yes', score=42)")
    assert isinstance(result, FinalOutput)
    assert result.output == {"answer": "yes", "score": 42}
    assert interpreter.execute("SUBMIT('no', 7)") == FinalOutput({"answer": "no", "score": 7})


@pytest.mark.parametrize(
    "call",
    [
        "SUBMIT(answer='only')",  # a field missing
        "SUBMIT(answer='a', score=1, extra=2)",  # a field not declared
        "SUBMIT('a', score=1)",  # positional and keyword at once
        "SUBMIT('a', 1, 2)",  # too many values
    ],
)
def test_a_submit_that_does_not_match_the_fields_is_a_type_error(make_interpreter: InterpreterMaker, call: str) -> None:
    interpreter = make_interpreter(output_fields=FIELDS)
    with pytest.raises(CodeExecutionError, match="TypeError"):
        interpreter.execute(call)
    assert interpreter.execute("SUBMIT(answer='fixed', score=1)") == FinalOutput({"answer": "fixed", "score": 1})


def test_output_fields_set_after_creation_apply_to_the_next_execution(interpreter: CodeInterpreter) -> None:
    interpreter.output_fields = FIELDS  # type: ignore[attr-defined]  # what dspy.RLM does
    assert interpreter.execute("SUBMIT(score=3, answer='late')") == FinalOutput({"answer": "late", "score": 3})


def test_submit_is_not_caught_by_except_exception(interpreter: CodeInterpreter) -> None:
    code = "try:\n    SUBMIT('done')\nexcept Exception:\n    print('swallowed')\nprint('after')"
    assert interpreter.execute(code) == FinalOutput({"output": "done"})


def test_a_submitted_value_that_is_not_json_is_not_an_error(interpreter: CodeInterpreter) -> None:
    result = interpreter.execute("SUBMIT({1, 2})")
    assert isinstance(result, FinalOutput)
    assert "{1, 2}" in str(result.output)  # its repr: Fleet's for the value, LocalInterpreter's for the whole output


@pytest.mark.not_supported_by("dspy-local", reason="LocalInterpreter turns the whole output into its repr")
def test_only_the_value_that_is_not_json_becomes_its_repr(make_interpreter: InterpreterMaker) -> None:
    interpreter = make_interpreter(output_fields=[{"name": "items"}, {"name": "count", "type": "int"}])
    assert interpreter.execute("SUBMIT(items={1, 2}, count=2)") == FinalOutput({"items": "{1, 2}", "count": 2})


def test_invalid_output_fields_are_refused_before_anything_runs(make_interpreter: InterpreterMaker) -> None:
    with pytest.raises(ValueError, match="output field names"):
        make_interpreter(output_fields=[{"name": "not valid"}])
    interpreter = make_interpreter()
    interpreter.output_fields = [{"name": "twice"}, {"name": "twice"}]  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unique"):
        interpreter.execute("1")
    interpreter.output_fields = None  # type: ignore[attr-defined]
    assert interpreter.execute("1") == 1


@pytest.mark.not_supported_by(
    "dspy-local", reason="LocalInterpreter does not check SUBMIT's values against the field types"
)
def test_typed_submit_checks_simple_types(make_interpreter: InterpreterMaker) -> None:
    interpreter = make_interpreter(output_fields=FIELDS)
    with pytest.raises(CodeExecutionError, match="TypeError"):
        interpreter.execute("SUBMIT(answer='yes', score='forty-two')")
