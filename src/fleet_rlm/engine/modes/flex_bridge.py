"""What ``dspy.Flex`` needs from Fleet's sandbox and model, and DSPy 3.4.1 does not quite give.

- :class:`ValueReturningSandbox`: Flex reads its module's result as the value of a trailing
  expression, as DSPy's own interpreters return it; Fleet's sandbox prints that value instead.
- :class:`BridgedLM`: the model as bridged predictors call it, passing the chat adapter's
  vouching for its message calls on to the turn's model, and remembering a budget stop that
  would otherwise reach the host only as text inside a sandbox traceback.
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterator
from typing import Any

from dspy.primitives import FinalOutput

from fleet_rlm.engine.budget import BudgetExceeded, TurnCancelled
from fleet_rlm.engine.dspy_compat import SandboxLM, adapter_call_origin, adapter_message_call
from fleet_rlm.sandbox.wrapper import WrapperSandbox

# Tags the value a rewritten trailing expression hands back through SUBMIT.
_TRAILING_VALUE_KEY = "__fleet_trailing_value__"
_TRAILING_VALUE_VAR = "__fleet_trailing_value"


class BridgedLM(SandboxLM):  # type: ignore[misc]
    """DSPy's ``SandboxLM`` over the turn's model, for the predictors a Flex module calls.

    Flex's facade uses an ``lm`` that already is a ``SandboxLM`` as it is. DSPy 3.4.1's own does
    not pass the adapter's vouching for its message call on to the LM it wraps, so every bridged
    call would warn that ``messages=`` is deprecated; this one passes it on, as ``MeteredLM``
    does. A budget or cancel error raised here reaches the module as a failed tool call, so it is
    kept in ``stopped_by`` for the route to raise on the host.
    """

    def __init__(self, lm: Any) -> None:
        super().__init__(lm)
        self.turn_lm = lm
        """The model this one wraps (kept here rather than read from ``SandboxLM``'s private ``_lm``)."""
        self.stopped_by: BudgetExceeded | TurnCancelled | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._bridged(kwargs):
            return super().__call__(*args, **kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        with self._bridged(kwargs):
            return await super().acall(*args, **kwargs)

    @contextlib.contextmanager
    def _bridged(self, kwargs: dict[str, Any]) -> Iterator[None]:
        messages = kwargs.get("messages")
        origin = adapter_call_origin()
        with contextlib.ExitStack() as stack:
            if messages is not None and origin is not None and origin[0] is self and origin[1] is messages:
                stack.enter_context(adapter_message_call(self.turn_lm, messages))
            try:
                yield
            except (BudgetExceeded, TurnCancelled) as exc:
                self.stopped_by = self.stopped_by or exc
                raise


class ValueReturningSandbox(WrapperSandbox):
    """A Fleet sandbox that returns the value of a trailing expression, as DSPy's interpreters do.

    Fleet's sandbox prints that value, like a REPL, which is what ``dspy.RLM`` shows the model.
    ``dspy.Flex`` instead reads its module's result as the value of the trailing expression
    (``LocalInterpreter`` and ``PythonInterpreter`` return it when it is not None, else the
    output). Here the trailing expression is handed back through ``SUBMIT`` without changing the
    line numbers of the code. Code that sets typed ``output_fields`` (a nested ``dspy.RLM``) runs
    unchanged.
    """

    def execute(self, code: str, variables: dict[str, Any] | None = None) -> Any:
        rewritten = None if self.output_fields is not None else return_trailing_value(code)
        if rewritten is None:
            return self.wrapped.execute(code, variables)
        result = self.wrapped.execute(rewritten, variables)
        if isinstance(result, FinalOutput):
            output = result.output
            if isinstance(output, dict) and set(output) == {"output"}:
                value = output["output"]
                if isinstance(value, dict) and set(value) == {_TRAILING_VALUE_KEY}:
                    return value[_TRAILING_VALUE_KEY]
        return result


def return_trailing_value(code: str) -> str | None:
    """``code`` with its trailing expression submitted when not None; None when there is none."""
    code = code.replace("\r\n", "\n").replace("\r", "\n")
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None  # the sandbox reports it
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return None
    last = tree.body[-1]
    if last.end_lineno is None or last.end_col_offset is None:
        return None
    data = code.encode("utf-8")
    line_starts = [0]
    for line in data.split(b"\n"):
        line_starts.append(line_starts[-1] + len(line) + 1)
    start = line_starts[last.lineno - 1] + last.col_offset
    end = line_starts[last.end_lineno - 1] + last.end_col_offset
    head = data[:start].decode("utf-8")
    expression = data[start:end].decode("utf-8")
    tail = data[end:].decode("utf-8")
    return (
        f"{head}{_TRAILING_VALUE_VAR} = ({expression}){tail}\n"
        f"if {_TRAILING_VALUE_VAR} is not None:\n"
        f"    SUBMIT({{{_TRAILING_VALUE_KEY!r}: {_TRAILING_VALUE_VAR}}})\n"
    )
