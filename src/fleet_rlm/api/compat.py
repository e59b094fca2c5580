"""OpenAI's chat completions on Fleet's turns: one call is one turn (docs/integrations.md).

The conversation's last message, a user's, is the task; the exchanges before it are the history.
``X-Fleet-Session`` (or the ``user`` field) binds the call to a durable session by id or name (a name
no session has yet is created); without either the call gets an ephemeral session, deleted once its
turn ends. What the turn does streams as ``reasoning_content`` (as OpenAI-compatible reasoning
models stream theirs), its answer as ``content``. A client that goes away cancels the turn.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, get_args

from fleet_rlm.api.compat_schemas import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    Choice,
    ChunkChoice,
    CompletionUsage,
    Delta,
    FinishReason,
    ModelCard,
    ModelList,
)
from fleet_rlm.api.errors import ApiError, openai_error
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.protocol.routes import Mode
from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.store import SessionRecord, StoreError, TurnRecord

MODEL = "fleet-rlm"
EPHEMERAL_TITLE = "ephemeral: an OpenAI-compatible call without a session"
OUTPUT_PREVIEW_CHARS = 2000
NO_RETRY = {"X-Should-Retry": "false"}
"""OpenAI's SDKs retry a 5xx; a turn that ran and failed must not be run again behind the caller's back."""
INSTRUCTION_ROLES = frozenset({"system", "developer"})


def model_list() -> ModelList:
    names = [MODEL, *(f"{MODEL}/{mode}" for mode in get_args(Mode))]
    return ModelList(data=[ModelCard(id=name, created=0, owned_by="fleet") for name in names])


def mode_of(model: str) -> str | None:
    """The mode ``model`` asks for (None: the session's); 404 ``model_not_found`` for any other name."""
    if model == MODEL:
        return None
    mode = model.removeprefix(f"{MODEL}/")
    if model.startswith(f"{MODEL}/") and mode in get_args(Mode):
        return mode
    known = ", ".join(card.id for card in model_list().data)
    raise ApiError(404, "model_not_found", f"the model {model[:100]!r} does not exist; use one of: {known}")


def _text(message: ChatMessage, index: int) -> str:
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    parts = []
    for part in message.content:
        if part.type != "text" or part.text is None:
            raise ApiError(
                400,
                "unsupported_content",
                f"messages.{index}.content: only text parts are supported, not {part.type[:40]!r}",
            )
        parts.append(part.text)
    return "\n".join(parts)


@dataclass
class Conversation:
    task: str
    history: list[tuple[str, str | None]] = field(default_factory=list)


def conversation(messages: list[ChatMessage]) -> Conversation:
    """The task (the last message, with any system or developer instructions before it) and the
    history: each earlier user message paired with the assistant reply after it."""
    last = len(messages) - 1
    if messages[last].role != "user":
        raise ApiError(
            400,
            "invalid_messages",
            f"messages.{last}: the last message must be the user's, not {messages[last].role!r}",
        )
    task = _text(messages[last], last).strip()
    if not task:
        raise ApiError(400, "invalid_messages", f"messages.{last}: the user's message is empty")
    instructions: list[str] = []
    history: list[tuple[str, str | None]] = []
    for index, message in enumerate(messages[:last]):
        text = _text(message, index)
        if message.role in INSTRUCTION_ROLES:
            instructions.append(text)
        elif message.role == "user":
            history.append((text, None))
        elif message.role == "assistant" and history and history[-1][1] is None:
            history[-1] = (history[-1][0], text)
    if instructions:
        task = "Instructions:\n" + "\n\n".join(instructions) + "\n\nTask:\n" + task
    return Conversation(task, history)


def activity(event: Event) -> str | None:
    """What a chat UI shows of ``event`` while the turn runs, or None."""
    data = event.data
    match event.type:
        case EventType.ROUTE_SELECTED:
            return f"Route: {data.get('route')} ({data.get('reason')})\n"
        case EventType.ITERATION_STARTED:
            return f"\n— iteration {data.get('iteration')} of {data.get('max_iterations')} —\n"
        case EventType.REASONING:
            return f"{data.get('text', '')}\n"
        case EventType.CODE:
            return f"```python\n{data.get('code', '')}\n```\n"
        case EventType.OUTPUT:
            text = str(data.get("text", ""))
            cut = "\n…" if len(text) > OUTPUT_PREVIEW_CHARS else ""
            return f"```text\n{text[:OUTPUT_PREVIEW_CHARS]}{cut}\n```\n"
        case EventType.EXECUTION_FAILED:
            return f"{data.get('error_type')}: {data.get('message')}\n"
        case EventType.TOOL_STARTED:
            return f"tool {data.get('name')}({data.get('arguments', '')})\n"
        case EventType.CHILD_STARTED:
            return f"child agent {data.get('child_id')}: {data.get('task')}\n"
        case EventType.CHILD_FINISHED:
            return f"child agent {data.get('child_id')}: {data.get('outcome')}\n"
        case EventType.ARTIFACT_CREATED:
            return f"artifact {data.get('path')} ({data.get('size')} bytes)\n"
        case EventType.WARNING | EventType.SANDBOX_RESTARTED | EventType.BUDGET_EXHAUSTED:
            return f"{event.type.value}: {data.get('message') or data.get('cause') or data.get('budget')}\n"
    return None


def usage_of(turn: TurnRecord) -> CompletionUsage:
    prompt = int(turn.usage.get("input_tokens") or 0)
    completion = int(turn.usage.get("output_tokens") or 0)
    return CompletionUsage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


def outcome(turn: TurnRecord) -> tuple[str, FinishReason]:
    """The answer and finish reason of a turn that answered; an :class:`ApiError` for one that did not."""
    if turn.status is TurnStatus.COMPLETED:
        return turn.answer or "", "stop"
    if turn.status is TurnStatus.INCOMPLETE:
        return turn.answer or "", "length"
    reason = turn.error or f"the turn ended {turn.status}"
    raise ApiError(500, f"turn_{turn.status}", f"turn {turn.id} {turn.status}: {reason}", NO_RETRY)


@dataclass
class CompletionCall:
    """One call's turn, in its bound or ephemeral session."""

    service: FleetService
    request: ChatCompletionRequest
    session: SessionRecord
    turn: TurnRecord
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def id(self) -> str:
        return f"chatcmpl-{self.turn.id}"

    @property
    def headers(self) -> dict[str, str]:
        return {"X-Fleet-Session": self.session.id, "X-Fleet-Turn": self.turn.id}

    @classmethod
    async def start(
        cls, service: FleetService, request: ChatCompletionRequest, session_ref: str | None
    ) -> CompletionCall:
        mode = mode_of(request.model)
        asked = conversation(request.messages)
        ref = session_ref or request.user
        if ref:
            session = await service.sessions.open(ref)
            # A client that sends only the new message continues the session's own history.
            history = asked.history or None
        else:
            session = await service.sessions.create(title=EPHEMERAL_TITLE)
            history = asked.history
        submission = TurnSubmission(message=asked.task, mode=mode, history=history)
        try:
            turn, _ = await service.turns.submit(session.id, submission)
        except BaseException:
            if not ref:  # refused only if the turn was stored all the same (its request cancelled meanwhile)
                with contextlib.suppress(StoreError):
                    await service.sessions.delete(session.id)
            raise
        if not ref:
            service.turns.delete_when_done(session.id, turn.id)
        return cls(service, request, session, turn)

    def abandon(self) -> None:
        """The client went away: cancel the turn if it still runs."""
        self.service.turns.abandon(self.turn.id)

    async def events(self) -> AsyncIterator[Event]:
        return await self.service.turns.events(self.turn.id)

    async def complete(self) -> ChatCompletion:
        """Wait for the turn, gathering its activity; the whole completion."""
        reasoning = []
        async for event in await self.events():
            text = activity(event)
            if text:
                reasoning.append(text)
        turn = await self.service.turns.get(self.turn.id)
        answer, finish = outcome(turn)
        message = AssistantMessage(content=answer, reasoning_content="".join(reasoning))
        return ChatCompletion(
            id=self.id,
            created=self.created,
            model=self.request.model,
            choices=[Choice(message=message, finish_reason=finish)],
            usage=usage_of(turn),
        )

    def _chunk(self, delta: Delta | None, finish: FinishReason | None = None, **extra: Any) -> str:
        choices = [] if delta is None else [ChunkChoice(delta=delta, finish_reason=finish)]
        chunk = ChatCompletionChunk(
            id=self.id, created=self.created, model=self.request.model, choices=choices, **extra
        )
        return chunk.model_dump_json(exclude_none=delta is not None)

    async def chunks(self) -> AsyncIterator[str]:
        """The ``data:`` of each frame: the role, the activity, the answer, the finish (and usage),
        ``[DONE]``; or an ``{"error"}`` frame for a turn that ended without an answer."""
        yield self._chunk(Delta(role="assistant", content=""))
        async for event in await self.events():
            text = activity(event)
            if text:
                yield self._chunk(Delta(reasoning_content=text))
        turn = await self.service.turns.get(self.turn.id)
        try:
            answer, finish = outcome(turn)
        except ApiError as exc:
            yield json.dumps(openai_error(exc.status, exc.code, exc.message))
            return
        yield self._chunk(Delta(content=answer))
        yield self._chunk(Delta(), finish)
        options = self.request.stream_options
        if options is not None and options.include_usage:
            yield self._chunk(None, usage=usage_of(turn))
        yield "[DONE]"
