"""``dspy.Flex`` runs its module's code in Fleet's sandbox, never in the host process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from dspy.primitives.code_interpreter import CodeExecutionError, FinalOutput

from fleet_rlm.engine.honesty import MODULE_UNVERIFIED_REASON
from fleet_rlm.engine.modes import select
from fleet_rlm.engine.modes.context import RouteContext
from fleet_rlm.engine.modes.flex import ValueReturningSandbox, run_flex
from fleet_rlm.models.scripted import fields_reply
from fleet_rlm.protocol.events import EventType
from fleet_rlm.sandbox.base import SandboxLimits, SandboxSpec
from fleet_rlm.sandbox.local import LocalSandboxBackend

from ..conftest import Harness
from .conftest import prompt, run_turn

PROBE_MODULE = """
import os


class Probe(dspy.Module):
    def __init__(self):
        super().__init__()
        self.respond = dspy.Predict("task: str -> answer: str")

    def forward(self, task, workspace, history):
        print("probe running")
        seen = f"cwd={os.getcwd()} pid={os.getpid()} host_file={os.path.exists(HOST_FILE)}"
        return dspy.Prediction(answer=seen + " | " + self.respond(task=task).answer)
"""


def test_the_flex_module_runs_in_the_sandbox_not_the_host(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host_file = tmp_path / "host-only.txt"
    host_file.write_text("secret")
    module = PROBE_MODULE.replace("HOST_FILE", repr(str(host_file)))

    def probe_flex(ctx: RouteContext) -> str:
        return run_flex(ctx, module)

    monkeypatch.setitem(select.ROUTES, "flex", probe_flex)
    harness.server.script("root", fields_reply(answer="model says hi"))
    run = run_turn(harness, "Probe", mode="flex")

    assert run.outcome.status == "completed", run.outcome.error
    where, reply = str(run.outcome.answer).split(" | ")
    facts = dict(part.split("=") for part in where.split())
    assert facts["cwd"] == "/workspace"  # the sandbox's view of the workspace
    assert int(facts["pid"]) != os.getpid()  # another process, in its own pid namespace
    assert facts["host_file"] == "False"  # the host's files are out of sight
    assert reply == "model says hi"  # the predictor itself ran on the host, on the turn's model
    assert "probe running" in run.output_text()  # the sandbox observer saw the module's output
    assert "Probe" in prompt(harness.server.model.requests_for("root")[0])
    assert run.outcome.usage["root_calls"] == 1
    # Nothing computed the module's answer: it is flagged, as an extracted one is.
    assert run.outcome.answer_source == "module"
    assert run.outcome.unverified_reason == MODULE_UNVERIFIED_REASON
    assert run.of(EventType.TURN_COMPLETED)[-1].data["unverified"] is True


def test_flex_module_errors_fail_the_turn_with_the_sandbox_traceback(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = "class Broken(dspy.Module):\n    def forward(self, task, workspace, history):\n        return 1 / 0\n"
    monkeypatch.setitem(select.ROUTES, "flex", lambda ctx: run_flex(ctx, broken))
    run = run_turn(harness, "Anything", mode="flex")
    assert run.outcome.status == "failed"
    assert run.outcome.error == "sandbox failed: the flex module raised ZeroDivisionError: division by zero"
    assert run.outcome.usage["sandbox_errors"] == 1
    assert run.events[-1].type is EventType.TURN_FAILED


def test_the_model_call_budget_stops_a_flex_module(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    twice = (
        "class Twice(dspy.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.respond = dspy.Predict('task: str -> answer: str')\n"
        "    def forward(self, task, workspace, history):\n"
        "        first = self.respond(task=task).answer\n"
        "        return dspy.Prediction(answer=first + self.respond(task=task).answer)\n"
    )
    monkeypatch.setitem(select.ROUTES, "flex", lambda ctx: run_flex(ctx, twice))
    harness.server.script("root", fields_reply(answer="one"), fields_reply(answer="two"))
    run = run_turn(harness, "Anything", mode="flex", settings={"max_model_calls": 1})
    assert run.outcome.status == "failed"
    assert run.outcome.error == "model-call budget exhausted: 1 of 1 calls used this turn"
    assert [e.data["budget"] for e in run.of(EventType.BUDGET_EXHAUSTED)] == ["model_calls"]
    assert run.outcome.usage["model_calls"] == 1


# -- the sandbox as Flex needs it -----------------------------------------------------------------


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[ValueReturningSandbox]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    spec = SandboxSpec(workspace, limits=SandboxLimits(memory_mb=1024, max_processes=32, execution_timeout=5.0))
    wrapped = ValueReturningSandbox(LocalSandboxBackend(interrupt_grace=0.5).create(spec))
    yield wrapped
    wrapped.shutdown()


def test_a_trailing_expression_returns_its_value(sandbox: ValueReturningSandbox) -> None:
    assert sandbox.execute("x = 40\nx + 2") == 42
    assert sandbox.execute("print('shown')\n{'a': [x]}  # a comment") == {"a": [40]}
    assert sandbox.execute("(\n    'multi'\n    + 'line'\n)") == "multiline"
    assert sandbox.execute("y = 1; y + x") == 41


def test_without_a_value_the_output_is_returned(sandbox: ValueReturningSandbox) -> None:
    assert sandbox.execute("print('hello')") == "hello"
    assert sandbox.execute("print('quiet')\nNone") == "quiet"


def test_submit_and_errors_behave_as_before(sandbox: ValueReturningSandbox) -> None:
    assert sandbox.execute("SUBMIT('done')") == FinalOutput({"output": "done"})
    with pytest.raises(CodeExecutionError, match="line 2"):
        sandbox.execute("x = 1\n1 / 0")
    with pytest.raises(SyntaxError):
        sandbox.execute("x = (")


def test_typed_output_fields_keep_fleet_behaviour(sandbox: ValueReturningSandbox) -> None:
    sandbox.output_fields = [{"name": "answer", "type": "str"}]
    assert sandbox.execute("1 + 1").strip() == "2"
