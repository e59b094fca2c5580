"""How a turn's programs ask the root model for a reply and read it.

``dspy.RLM`` hands the model its earlier iterations as one ``repl_history`` text inside a single user
message. Small models read that as context rather than as their own work: at every iteration they wrote
the same first step again ("this is the first interaction"). Fleet's adapters send each earlier
iteration as the model's own assistant message (its reasoning and code) followed by a user message with
that code's output, the layout chat models are trained on, so the model sees what it already did and
what came of it; the last message restates the task, as the RLM paper's reference implementation does
at every step.
"""

from __future__ import annotations

from typing import Any

import dspy

from fleet_rlm.engine.dspy_compat import REPLEntry, REPLHistory

VARIABLES = "variables_info"
HISTORY = "repl_history"
ITERATION = "iteration"
_STEP = dspy.Signature("repl_history -> reasoning, code")
"""The fields of one RLM iteration as the model wrote them."""


TASK_REMINDER_CHARS = 600


def next_step_reminder(task: str) -> str:
    """The line under the last output that sends the model on from it, restating the task (cut to
    :data:`TASK_REMINDER_CHARS`): without it a small model often ran its first step again."""
    text = " ".join(task.split())
    if len(text) > TASK_REMINDER_CHARS:
        text = text[:TASK_REMINDER_CHARS] + " ..."
    return (
        f"Your next step toward the task ({text}): build on the outputs above without repeating a step; "
        "when an output answers the task, SUBMIT the answer."
    )


class TrajectoryAsConversation:
    """Adapter mixin: in the RLM's action step (inputs ``variables_info``, ``repl_history``, ``iteration``),
    each earlier iteration becomes an assistant message (its reasoning and code) and a user message (its
    output, then the next iteration number), after the first request as the model saw it at iteration 1;
    the last one also restates ``task`` (:func:`next_step_reminder`). The extract step, which reads the
    trajectory as a transcript, keeps DSPy's layout."""

    task: str | None = None

    def format(self, signature: Any, demos: Any, inputs: dict[str, Any]) -> list[dict[str, Any]]:
        history = inputs.get(HISTORY)
        total = _total_iterations(inputs.get(ITERATION))
        if not isinstance(history, REPLHistory) or not history.entries or total is None:
            return super().format(signature, demos, inputs)  # type: ignore[misc, no-any-return]
        first = {**inputs, HISTORY: REPLHistory(max_output_chars=history.max_output_chars), ITERATION: f"1/{total}"}
        messages: list[dict[str, Any]] = super().format(signature, demos, first)  # type: ignore[misc]
        later = signature.delete(HISTORY).delete(VARIABLES)
        for index, entry in enumerate(history.entries):
            messages.append({"role": "assistant", "content": self._step_content(entry)})
            request = self.format_user_message_content(  # type: ignore[attr-defined]
                later, {ITERATION: f"{index + 2}/{total}"}, main_request=index == len(history.entries) - 1
            )
            output = REPLEntry.format_output(entry.output, history.max_output_chars)
            messages.append({"role": "user", "content": f"{output}\n\n{request}"})
        if self.task:
            messages[-1]["content"] = self._with_reminder(messages[-1]["content"], later)
        return messages

    def _with_reminder(self, content: str, signature: Any) -> str:
        """``content`` with the reminder before the output requirements (DSPy's last paragraph)."""
        requirements = self.user_message_output_requirements(signature)  # type: ignore[attr-defined]
        assert self.task is not None
        reminder = next_step_reminder(self.task)
        if content.endswith(requirements):
            return f"{content[: -len(requirements)]}{reminder}\n\n{requirements}"
        return f"{content}\n\n{reminder}"

    def _step_content(self, entry: REPLEntry) -> str:
        code = entry.code if isinstance(self, dspy.JSONAdapter) else f"```python\n{entry.code}\n```"
        outputs = {"reasoning": entry.reasoning, "code": code}
        return str(self.format_assistant_message_content(_STEP, outputs))  # type: ignore[attr-defined]


def _total_iterations(iteration: Any) -> str | None:
    """``20`` of DSPy's ``"3/20"`` iteration input, or None when there is none."""
    if not isinstance(iteration, str) or "/" not in iteration:
        return None
    return iteration.rsplit("/", 1)[1]


class FleetChatAdapter(TrajectoryAsConversation, dspy.ChatAdapter):  # type: ignore[misc]
    """DSPy's chat adapter with the trajectory as a conversation; its JSON fallback likewise."""

    def __init__(self, task: str | None = None) -> None:
        super().__init__()
        self.task = task

    def _make_json_adapter_fallback(self) -> dspy.JSONAdapter:
        return FleetJSONAdapter(self.task)


class FleetJSONAdapter(TrajectoryAsConversation, dspy.JSONAdapter):  # type: ignore[misc]
    """DSPy's JSON adapter with the trajectory as a conversation."""

    def __init__(self, task: str | None = None) -> None:
        super().__init__()
        self.task = task


TurnAdapter = FleetChatAdapter


def turn_adapter(task: str) -> TurnAdapter:
    """The adapter a turn's (or a child's) programs run with, ``task`` being what it was asked."""
    return FleetChatAdapter(task)


def stream_as(adapter: dspy.Adapter) -> str:
    """The DSPy adapter whose stream markers ``adapter`` writes (DSPy's stream listener knows adapters by
    class name)."""
    return "JSONAdapter" if isinstance(adapter, dspy.JSONAdapter) else "ChatAdapter"
