from __future__ import annotations

from typing import Any

import dspy

from fleet_rlm.engine import program
from fleet_rlm.engine.bridge.allowlist import sub_agent_guidance
from fleet_rlm.engine.program import FleetRLM, build_rlm, task_signature


class Factory:
    """An interpreter factory as ``dspy.RLM`` reads it (never called here)."""

    def __init__(self, instructions: str = "Python 3.11 in a sandbox.") -> None:
        self.execution_instructions = instructions

    def __call__(self) -> Any:
        raise AssertionError("no interpreter is made while a program is built")


def spawn_agent(task: str) -> str:
    """Hand ``task`` to a child agent."""
    return task


def built(factory: Factory, *, calls: int = 10, tools: list[Any] | None = None, **kwargs: Any) -> FleetRLM:
    return build_rlm(
        max_iterations=3,
        max_model_calls=calls,
        max_output_chars=1000,
        sub_lm=None,
        interpreter_factory=factory,
        tools=tools,
        **kwargs,
    )


def dspy_action_instructions(factory: Factory, *, calls: int = 10, tools: list[Any] | None = None) -> str:
    """What plain ``dspy.RLM`` shows the model on each iteration once Fleet's guidance replaces its own."""
    plain = dspy.RLM(
        task_signature(),
        max_iters=3,
        max_llm_calls=calls,
        max_output_chars=1000,
        interpreter_factory=factory,
        tools=tools,
    )
    guidance = sub_agent_guidance(delegation=bool(tools))
    return str(plain._action_signature_for_current_factory(factory, guidance).instructions)


def test_programs_built_alike_share_signatures_that_say_what_dspy_would_say() -> None:
    factory = Factory()
    first, second = built(factory, tools=[spawn_agent]), built(factory, tools=[spawn_agent])
    assert first.generate_action.signature is second.generate_action.signature
    assert first.extract.signature is second.extract.signature
    action = first.generate_action.signature
    assert action.instructions == dspy_action_instructions(factory, tools=[spawn_agent])
    assert "child agent (`spawn_agent`)" in action.instructions
    guidance = sub_agent_guidance(delegation=True)
    assert first._action_signature_for_current_factory(factory, guidance) is action, "no new signature per iteration"
    without = first._action_signature_for_current_factory(factory, "")  # a runtime that cannot host sub-agents
    assert guidance.strip() not in without.instructions and without.instructions.startswith(action.instructions[:200])


def test_a_different_budget_tool_set_runtime_or_task_gets_signatures_of_its_own() -> None:
    factory = Factory()
    base = built(factory).generate_action.signature
    others = {
        "budget": built(factory, calls=11),
        "tools": built(factory, tools=[spawn_agent]),
        "runtime": built(Factory("Python 3.12 elsewhere.")),
        "task": built(factory, skills=[("sales", "Regional sales tables.")]),
    }
    for what, other in others.items():
        assert other.generate_action.signature is not base, what
    assert "11" in others["budget"].generate_action.signature.instructions
    assert "Python 3.12 elsewhere." in others["runtime"].generate_action.signature.instructions
    assert "Regional sales tables." in others["task"].generate_action.signature.instructions
    assert built(Factory("Python 3.12 elsewhere.")).generate_action.signature.instructions == dspy_action_instructions(
        Factory("Python 3.12 elsewhere.")
    )


def test_a_process_keeps_a_bounded_number_of_builds() -> None:
    factory = Factory()
    for calls in range(100, 100 + program.SIGNATURES_KEPT + 5):
        built(factory, calls=calls)
    assert len(program._built) == program.SIGNATURES_KEPT
