"""How a turn's programs ask the root model for a reply and read it.

Two things change from DSPy's adapters, and only for calls to the turn's root model:

- **The trajectory is a conversation.** ``dspy.RLM`` hands the model its earlier iterations as one
  ``repl_history`` text inside a single user message. Small models read that as context rather than as
  their own work: at every iteration they wrote the same first step again ("this is the first
  interaction"). Fleet's adapters send each earlier iteration as the model's own assistant message
  (its reasoning and code) followed by a user message with that code's output, the layout chat models
  are trained on, so the model sees what it already did and what came of it; the last message restates
  the task, as the RLM paper's reference implementation does at every step.
- **Replies follow a schema where the endpoint enforces one.** When the endpoint honours a JSON schema
  in ``response_format`` (:mod:`fleet_rlm.models.structured`), the root model is asked for a JSON object
  with exactly the signature's output fields, so a reply can only be unreadable when it was cut short.

Calls to any other model (the sub-model behind ``llm_query``, bridged predictors) get DSPy's chat
adapter unchanged.
"""

from __future__ import annotations

import re
from typing import Any

import dspy

from fleet_rlm.config.sections import LMSettings
from fleet_rlm.engine.dspy_compat import REPLEntry, REPLHistory, structured_outputs_model
from fleet_rlm.engine.honesty import LoopGuard
from fleet_rlm.models.structured import Style, response_format, schema_support

VARIABLES = "variables_info"
HISTORY = "repl_history"
ITERATION = "iteration"
_STEP = dspy.Signature("repl_history -> reasoning, code")
"""The fields of one RLM iteration as the model wrote them."""


TASK_REMINDER_CHARS = 600


def next_step_reminder(task: str, submit: str | None = None) -> str:
    """The line under the last output that sends the model on from it, restating the task (cut to
    :data:`TASK_REMINDER_CHARS`): without it a small model often ran its first step again. When the loop
    guard has just suggested a SUBMIT call (``submit``), the line ends with it: told it only inside the
    output, a 1.5B model printed the same table three more times."""
    text = " ".join(task.split())
    if len(text) > TASK_REMINDER_CHARS:
        text = text[:TASK_REMINDER_CHARS] + " ..."
    if submit is not None:
        return (
            f"Your next step toward the task ({text}): if the output above answers it, your code is this one "
            f"line:\n{submit}\nIf it does not, write different code."
        )
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
    guard: LoopGuard | None = None
    """The loop's guard, whose :attr:`~LoopGuard.suggested_submit` the reminder ends with."""

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
        reminder = next_step_reminder(self.task, self.guard.suggested_submit if self.guard else None)
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

    def __init__(self, task: str | None = None, guard: LoopGuard | None = None) -> None:
        super().__init__()
        self.task, self.guard = task, guard

    def _make_json_adapter_fallback(self) -> dspy.JSONAdapter:
        return FleetJSONAdapter(self.task, self.guard)


class FleetJSONAdapter(TrajectoryAsConversation, dspy.JSONAdapter):  # type: ignore[misc]
    """DSPy's JSON adapter with the trajectory as a conversation."""

    def __init__(self, task: str | None = None, guard: LoopGuard | None = None) -> None:
        super().__init__()
        self.task, self.guard = task, guard


CODE_IN_JSON = (
    '`code` is a JSON string: a double quote inside it ends it unless written \\", so write the strings in '
    "your Python with single quotes ('text')."
)
"""Told to the model whose replies follow a schema: a 1.5B model wrote ``review["text"]`` unescaped, and its
code arrived cut off at ``review[``."""


class SchemaAdapter(FleetJSONAdapter):
    """:class:`FleetJSONAdapter` sending the signature's output schema in ``style`` with each call to
    ``root``; calls to any other model (whose endpoint was not probed) go through :class:`FleetChatAdapter`."""

    def __init__(self, style: Style, root: Any, task: str | None = None, guard: LoopGuard | None = None) -> None:
        super().__init__(task, guard)
        self.style: Style = style
        self.root = root
        self._chat = FleetChatAdapter()

    def __call__(self, lm: Any, lm_kwargs: dict[str, Any], signature: Any, demos: Any, inputs: Any) -> Any:
        if lm is not self.root:
            return self._chat(lm, lm_kwargs, signature, demos, inputs)
        return super().__call__(lm, lm_kwargs, signature, demos, inputs)

    async def acall(self, lm: Any, lm_kwargs: dict[str, Any], signature: Any, demos: Any, inputs: Any) -> Any:
        if lm is not self.root:
            return await self._chat.acall(lm, lm_kwargs, signature, demos, inputs)
        return await super().acall(lm, lm_kwargs, signature, demos, inputs)

    def format_field_structure(self, signature: Any) -> str:
        structure = str(super().format_field_structure(signature))
        if "code" not in signature.output_fields:
            return structure
        return f"{structure}\n\n{CODE_IN_JSON}"

    def _prepare_response_format(self, lm: Any, lm_kwargs: dict[str, Any], signature: Any) -> None:
        schema = structured_outputs_model(signature).model_json_schema()
        lm_kwargs["response_format"] = response_format(self.style, "reply", schema)

    def parse(self, signature: Any, completion: str) -> dict[str, Any]:
        fields: dict[str, Any] = super().parse(signature, completion)
        if isinstance(fields.get("code"), str):
            fields["code"] = escaped_string_newlines(fields["code"])
        return fields


MAX_NEWLINE_REPAIRS = 50
_FENCED = re.compile(r"\A(\s*```[\w+-]*\n)(.*?)(\n```\s*)\Z", re.DOTALL)


def escaped_string_newlines(code: str) -> str:
    """``code`` with each line break inside a one-line string literal written as ``\\n`` again.

    In a JSON reply, code must write the escape ``\\n`` as ``\\\\n``; a small model writes ``\\n``, which
    JSON reads as a line break, so ``split('\\n')`` arrives split over two lines and does not compile.
    Only code that does not compile for exactly that reason (an unterminated string literal) is changed,
    so valid code is never touched."""
    fenced = _FENCED.match(code)
    if fenced:
        return fenced.group(1) + escaped_string_newlines(fenced.group(2)) + fenced.group(3)
    for _ in range(MAX_NEWLINE_REPAIRS):
        try:
            compile(code, "<reply>", "exec")
        except SyntaxError as error:
            lines = code.split("\n")
            line = (error.lineno or 0) - 1
            if not (error.msg or "").startswith("unterminated string literal") or not 0 <= line < len(lines) - 1:
                return code
            lines[line : line + 2] = [lines[line] + "\\n" + lines[line + 1]]
            code = "\n".join(lines)
        else:
            return code
    return code


TurnAdapter = FleetChatAdapter | SchemaAdapter


def schema_style(lm: LMSettings) -> Style | None:
    """The style in which the root endpoint is sent its replies' schema, or None for DSPy's chat format:
    ``lm.structured_output`` when it names one, what the endpoint was found to honour under ``auto``."""
    if lm.structured_output == "off":
        return None
    if lm.structured_output != "auto":
        return lm.structured_output
    return schema_support(lm).style


def turn_adapter(lm: LMSettings, root: Any, task: str, guard: LoopGuard | None = None) -> TurnAdapter:
    """The adapter a turn's (or a child's) programs run with, ``root`` being its metered root model,
    ``task`` what it was asked and ``guard`` its loop's guard."""
    style = schema_style(lm)
    return FleetChatAdapter(task, guard) if style is None else SchemaAdapter(style, root, task, guard)


def stream_as(adapter: dspy.Adapter) -> str:
    """The DSPy adapter whose stream markers ``adapter`` writes (DSPy's stream listener knows adapters by
    class name)."""
    return "JSONAdapter" if isinstance(adapter, dspy.JSONAdapter) else "ChatAdapter"
