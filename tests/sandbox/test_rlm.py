"""A real ``dspy.RLM`` turn runs on the sandbox unchanged, with the scripted model as its LM."""

from __future__ import annotations

from pathlib import Path

import dspy
import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, fields_reply, rlm_step
from fleet_rlm.sandbox.base import SandboxFactory, SandboxSpec
from fleet_rlm.sandbox.local import LocalSandboxBackend
from fleet_rlm.sandbox.local_sandbox import LocalSandbox

from .helpers import TEST_LIMITS, RecordingObserver


# DSPy's own facade (SandboxLM) calls the LM in a way DSPy 3.4.1 itself deprecates.
@pytest.mark.filterwarnings("ignore:Passing OpenAI-style message dictionaries:DeprecationWarning")
def test_rlm_turn_runs_on_the_sandbox(
    scripted_server: ScriptedModelServer, backend: LocalSandboxBackend, workspace: Path, observer: RecordingObserver
) -> None:
    (workspace / "notes.txt").write_text("the launch code is 7421\n")
    scripted_server.script(
        "root",
        rlm_step("Look at the input and the workspace.", "print(len(context))\nprint(open('notes.txt').read())"),
        rlm_step("Ask a sub-model.", "summary = llm_query('Summarize: ' + context)\nprint(summary)"),
        rlm_step(
            "Use a sub-agent through the sandboxed dspy facade.",
            "import dspy\nguess = dspy.Predict('question -> answer')(question='code?').answer\nprint(guess)",
        ),
        rlm_step("Done.", "SUBMIT(answer=summary + ' / ' + guess, code=7421)"),
    )
    scripted_server.script("sub", "a short summary", fields_reply(answer="7421"))
    root = dspy.LM("openai/root", api_base=scripted_server.base_url, api_key="x", cache=False)
    sub = dspy.LM("openai/sub", api_base=scripted_server.base_url, api_key="x", cache=False)
    factory = SandboxFactory(backend, SandboxSpec(workspace, limits=TEST_LIMITS, observer=observer))
    rlm = dspy.RLM("context -> answer: str, code: int", max_iters=5, sub_lm=sub, interpreter_factory=factory)

    with dspy.context(lm=root):
        prediction = rlm(context="A long document about launch codes.")

    assert prediction.answer == "a short summary / 7421"
    assert prediction.code == 7421
    trajectory_outputs = [step["output"] for step in prediction.trajectory]
    assert trajectory_outputs[0] == "35\nthe launch code is 7421"
    assert "7421" in trajectory_outputs[2]
    assert scripted_server.model.remaining("root") == 0 and scripted_server.model.remaining("sub") == 0
    # The tool calls were observed, and RLM shut the sandbox down.
    assert "llm_query" in [name for _, name, _ in observer.started]
    [sandbox] = factory.created
    assert isinstance(sandbox, LocalSandbox) and sandbox.worker_pid is not None
    assert not Path(f"/proc/{sandbox.worker_pid}").exists()


def test_execution_instructions_reach_the_model(
    scripted_server: ScriptedModelServer, backend: LocalSandboxBackend, workspace: Path
) -> None:
    scripted_server.script("root", rlm_step("Answer.", "SUBMIT(answer='ok')"))
    root = dspy.LM("openai/root", api_base=scripted_server.base_url, api_key="x", cache=False)
    factory = SandboxFactory(backend, SandboxSpec(workspace, limits=TEST_LIMITS))
    with dspy.context(lm=root):
        assert dspy.RLM("question -> answer", max_iters=2, interpreter_factory=factory)(question="?").answer == "ok"
    [request] = scripted_server.model.requests_for("root")
    assert "isolated sandbox process" in str(request["messages"])
