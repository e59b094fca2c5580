"""The ``flex`` route: a ``dspy.Flex`` module over the task signature, its code run in Fleet's sandbox.

``dspy.Flex`` never runs its module source in the host process: every forward creates an
interpreter from its factory, installs DSPy's sandbox ``dspy`` facade there, runs the module and
bridges predictor calls back to the host, where they go through the turn's metered model.
Fleet hands it the turn's sandbox factory, so the module runs isolated, with the workspace as its
working directory, and its output, tool calls and artifacts become the turn's events.
"""

from __future__ import annotations

import dspy
from dspy.primitives import CodeExecutionError, CodeInterpreterError

from fleet_rlm.engine.modes.context import RouteContext
from fleet_rlm.engine.modes.flex_bridge import BridgedLM, ValueReturningSandbox
from fleet_rlm.engine.program import FleetTask
from fleet_rlm.protocol.events import new_id
from fleet_rlm.protocol.payloads import Code, Reasoning

# Fleet's starting module: one bounded pass. Its code reads the workspace's text input files (it
# runs in the sandbox, at the workspace), then one ChainOfThought answers from them. An optimizer
# such as dspy.GEPA may rewrite it; the contract is FleetTask's inputs and its ``answer``.
FLEX_MODULE = r"""
import os

MAX_FILE_CHARS = 20_000
MAX_TOTAL_CHARS = 60_000


def read_input_files(root="files"):
    # The text of the input files, each cut at MAX_FILE_CHARS, all together at MAX_TOTAL_CHARS.
    paths = sorted(os.path.join(folder, name) for folder, _, names in os.walk(root) for name in names)
    parts, room = [], MAX_TOTAL_CHARS
    for path in paths:
        if room <= 0:
            parts.append(f"[{path} and any later files not read: no room left]")
            break
        limit = min(MAX_FILE_CHARS, room)
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read(limit + 1)
        except (OSError, UnicodeDecodeError):
            parts.append(f"## {path}\n(not a text file; not read)")
            continue
        if len(text) > limit:
            text = text[:limit] + "\n[... cut here: the file is longer]"
        parts.append(f"## {path}\n{text}")
        room -= len(text)
    return "\n\n".join(parts) or "(no input files)"


class FleetTaskModule(dspy.Module):
    def __init__(self):
        super().__init__()
        self.respond = dspy.ChainOfThought(
            dspy.Signature(
                "task: str, workspace: str, history: str, files: str -> answer: str",
                "You are Fleet, an analyst for data and documents. `files` holds the text of the "
                "workspace's input files, some cut short; `workspace` lists every file. Answer the task "
                "from them and the conversation. Quote exact figures; if what you need is cut off or "
                "missing, say so rather than guess. The answer is for a person: concise Markdown.",
            )
        )

    def forward(self, task, workspace, history):
        result = self.respond(task=task, workspace=workspace, history=history, files=read_input_files())
        return dspy.Prediction(answer=result.answer, reasoning=result.reasoning)
""".strip()


def run_flex(ctx: RouteContext, module_src: str | None = None) -> str:
    """Answer with ``dspy.Flex`` running ``module_src`` (the served program's module unless given)."""
    module_src = module_src or ctx.program.flex_module_src or FLEX_MODULE
    flex = build_flex(ctx)
    flex.load_state({"module_src": module_src})
    # The module source is the code this route runs: show it like any other code.
    with ctx.trace.lock:
        ctx.trace.iteration_span = new_id("span")
    ctx.trace.emit_in_iteration(Code(code=flex.module_src or ""))
    inputs = {name: str(value) for name, value in ctx.inputs.items()}  # plain JSON crosses the sandbox boundary
    lm = BridgedLM(ctx.root_lm)
    try:
        with ctx.lm_context(), dspy.context(lm=lm):
            prediction = flex(**inputs)
    except CodeExecutionError as exc:
        if lm.stopped_by is not None:
            raise lm.stopped_by from exc  # the budget or a cancel ended the turn, not the module
        raise FlexModuleFailed(f"the flex module raised {_last_line(exc)}") from exc
    reasoning = prediction.get("reasoning")
    if reasoning:
        ctx.trace.emit_in_iteration(Reasoning(text=str(reasoning)))
    return str(prediction.answer)


def build_flex(ctx: RouteContext) -> dspy.Flex:
    factory = ctx.interpreter_factory

    def sandbox() -> ValueReturningSandbox:
        return ValueReturningSandbox(factory())

    return dspy.Flex(
        FleetTask,
        tools=list(ctx.tools),
        interpreter_factory=sandbox,
        # Every predictor call costs model calls, so the turn's model-call budget is the limit.
        max_predictor_calls=None,
    )


class FlexModuleFailed(CodeInterpreterError):  # type: ignore[misc]
    """The module's code raised; the message names the exception the sandbox reported."""


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
