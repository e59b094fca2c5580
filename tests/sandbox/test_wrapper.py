"""The decorator base: a wrapper that overrides nothing is the sandbox it wraps, in every respect."""

from __future__ import annotations

from typing import Any

from dspy.primitives import FinalOutput

from fleet_rlm.sandbox.base import Sandbox
from fleet_rlm.sandbox.local_sandbox import LocalSandbox
from fleet_rlm.sandbox.wrapper import WrapperSandbox


def protocol_members() -> set[str]:
    """Every member the ``Sandbox`` protocol declares: attributes and methods alike."""
    declared = set(Sandbox.__annotations__) | {name for name in vars(Sandbox) if not name.startswith("_")}
    return declared


def test_the_base_defines_every_member_of_the_sandbox_protocol() -> None:
    missing = {name for name in protocol_members() if not hasattr(WrapperSandbox, name)}
    assert not missing, f"WrapperSandbox does not forward {sorted(missing)}"


def test_a_wrapper_that_overrides_nothing_runs_tools_and_submit_on_the_sandbox(sandbox: LocalSandbox) -> None:
    wrapper = WrapperSandbox(sandbox)
    seen: list[Any] = []
    wrapper.tools = {"note": lambda value: seen.append(value) or "noted"}
    wrapper.output_fields = [{"name": "answer", "type": "int"}]
    wrapper.start()

    assert wrapper.spec is sandbox.spec
    assert wrapper.isolated == sandbox.isolated
    assert wrapper.usable
    assert sandbox.tools is wrapper.tools
    printed = wrapper.execute("print(note(41))")
    result = wrapper.execute("SUBMIT(answer=42)")

    assert "noted" in str(printed)
    assert seen == [41]
    assert result == FinalOutput({"answer": 42})
    wrapper.shutdown()
    assert not wrapper.usable and not sandbox.usable


class CountingSandbox(WrapperSandbox):
    """A decorator that changes one thing, as the real ones do."""

    def __init__(self, wrapped: Sandbox) -> None:
        super().__init__(wrapped)
        self.executions = 0

    def execute(self, code: str, variables: dict[str, Any] | None = None) -> Any:
        self.executions += 1
        return super().execute(code, variables)


def test_a_decorator_overriding_one_method_keeps_the_rest_and_can_swap_the_sandbox(
    make_sandbox: Any,
) -> None:
    first, second = make_sandbox(), make_sandbox()
    counting = CountingSandbox(first)
    counting.start()
    counting.execute("x = 1")
    counting.wrapped = second
    counting.start()

    result = counting.execute("print('x' in globals())")

    assert counting.executions == 2
    assert "False" in str(result)  # the second sandbox ran it: the first one's x is not in it
    counting.interrupt()
    assert not second.usable and first.usable
