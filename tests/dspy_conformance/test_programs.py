"""``dspy.RLM`` and ``dspy.Flex`` run on the interpreter unchanged, their model the scripted one over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dspy
import pytest
from dspy.primitives import CodeInterpreter

from fleet_rlm.models.scripted import ScriptedModelServer, fields_reply, rlm_step


def model(server: ScriptedModelServer, name: str) -> dspy.LM:
    return dspy.LM(f"openai/{name}", api_base=server.base_url, api_key="scripted", cache=False, num_retries=0)


def prompt_of(request: dict[str, Any]) -> str:
    return "\n".join(str(message.get("content")) for message in request["messages"])


def add(left: int, right: int) -> int:
    """Add two numbers."""
    return left + right


def test_dspy_rlm_runs_on_it(
    model_server: ScriptedModelServer, interpreter_factory: Callable[[], CodeInterpreter]
) -> None:
    model_server.script(
        "root",
        rlm_step("Add with the tool.", "total = add(left=19, right=23)\ntotal"),
        rlm_step("Ask the sub-model.", "word = llm_query('Say ok')\nprint(word)"),
        rlm_step("Answer.", "SUBMIT(answer=f'{total} {word}')"),
    )
    model_server.script("sub", "ok")
    rlm = dspy.RLM(
        "question -> answer: str",
        max_iters=4,
        tools=[add],
        sub_lm=model(model_server, "sub"),
        interpreter_factory=interpreter_factory,
    )

    with dspy.context(lm=model(model_server, "root")):
        prediction = rlm(question="What is 19 + 23?")

    assert prediction.answer == "42 ok"
    assert [step["output"] for step in prediction.trajectory[:2]] == ["42", "ok"]  # the trailing value, the print
    assert model_server.model.remaining("root") == 0 and model_server.model.remaining("sub") == 0
    instructions = getattr(interpreter_factory, "execution_instructions", "")
    assert instructions and instructions in prompt_of(model_server.model.requests_for("root")[0])


class Offset(dspy.Signature):
    value: int = dspy.InputField()
    result: int = dspy.OutputField()


FLEX_MODULE = """
class OffsetModule(dspy.Module):
    def __init__(self):
        super().__init__()
        self.solve = dspy.Predict("value: int -> result: int")

    def forward(self, value):
        shifted = add(left=value, right=1)
        return dspy.Prediction(result=self.solve(value=shifted).result)
""".strip()


# DSPy's own facade (SandboxLM) calls the LM in a way DSPy 3.4.1 itself deprecates.
@pytest.mark.filterwarnings("ignore:Passing OpenAI-style message dictionaries:DeprecationWarning")
def test_dspy_flex_runs_on_it(
    model_server: ScriptedModelServer, interpreter_factory: Callable[[], CodeInterpreter]
) -> None:
    model_server.script("root", fields_reply(result="42"))
    program = dspy.Flex(Offset, tools=[add], interpreter_factory=interpreter_factory)
    program.load_state({"module_src": FLEX_MODULE})

    with dspy.context(lm=model(model_server, "root")):
        assert program(value=20).result == 42

    [request] = model_server.model.requests_for("root")
    assert "21" in prompt_of(request)  # the module ran, its tool call included, before the bridged predictor
