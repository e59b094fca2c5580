"""The ``direct`` route: one ``dspy.ChainOfThought`` answer from the task and the session history.

No code, no sandbox, no workspace: for greetings, explanations and follow-ups about earlier
answers. The reasoning streams live as ``reasoning.delta`` events, then arrives whole.
"""

from __future__ import annotations

import asyncio
import dataclasses

import dspy

from fleet_rlm.engine.inputs import Text
from fleet_rlm.engine.modes.context import RouteContext
from fleet_rlm.engine.modes.rlm import stream_program
from fleet_rlm.protocol.events import new_id
from fleet_rlm.protocol.payloads import Reasoning


class DirectAnswer(dspy.Signature):  # type: ignore[misc]
    """You are Fleet, an assistant for analysing data and documents. Answer the person's message
    directly from the conversation so far and general knowledge. You cannot see or open any files in
    this reply: if the answer depends on file contents you have not been shown, say so plainly.
    The answer is for a person: concise Markdown."""

    task: Text = dspy.InputField(desc="What the person asked for.")
    history: Text = dspy.InputField(
        desc="The memory the person approved, if any, then earlier turns of this conversation, oldest first."
    )
    answer: str = dspy.OutputField(desc="The answer for the person, in Markdown.")


def run_direct(ctx: RouteContext) -> str:
    program = dspy.ChainOfThought(DirectAnswer)
    # The workspace manifest is left out on purpose: this route cannot open files.
    ctx = dataclasses.replace(ctx, inputs={"task": ctx.inputs["task"], "history": ctx.inputs["history"]})
    with ctx.trace.lock:
        ctx.trace.iteration_span = new_id("span")  # one step, under the turn's root span
    with ctx.lm_context():
        if ctx.settings.lm.stream:
            prediction = asyncio.run(stream_program(ctx, program, program.predict, ("reasoning",)))
        else:
            prediction = program(**ctx.inputs)
    reasoning = getattr(prediction, "reasoning", None)
    if reasoning:
        ctx.trace.emit_in_iteration(Reasoning(text=str(reasoning)))
    return str(prediction.answer)
