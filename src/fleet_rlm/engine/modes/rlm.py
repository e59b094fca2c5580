"""The ``rlm`` route: ``dspy.RLM`` writing code in Fleet's sandbox, iteration by iteration."""

from __future__ import annotations

import asyncio
from typing import Any

import dspy
from dspy.streaming import StatusMessageProvider, StreamListener, StreamResponse

from fleet_rlm.engine.adapters import stream_as
from fleet_rlm.engine.modes.context import RouteContext
from fleet_rlm.engine.observe import RLMCallbacks
from fleet_rlm.engine.program import build_rlm
from fleet_rlm.engine.streamed_json import StreamedJsonString
from fleet_rlm.protocol.payloads import CodeDelta, ReasoningDelta


def run_rlm(ctx: RouteContext) -> str:
    rlm = build_rlm(
        max_iterations=ctx.max_iterations,
        max_model_calls=ctx.budget.max_model_calls,
        max_output_chars=ctx.settings.budget.max_output_chars,
        sub_lm=ctx.sub_lm,
        interpreter_factory=ctx.interpreter_factory,
        tools=ctx.tools or None,
        guard=ctx.trace.guard,
        on_extract=ctx.trace.mark_extracted,
        skills=ctx.skills,
        program=ctx.program,
        recovery=ctx.trace.recovery(),
    )
    callbacks = RLMCallbacks(ctx.trace, rlm.generate_action, rlm.extract)
    with ctx.lm_context(callbacks):
        if ctx.settings.lm.stream:
            prediction = asyncio.run(stream_program(ctx, rlm, rlm.generate_action, ("reasoning", "code")))
        else:
            prediction = rlm(**ctx.inputs)
    return str(prediction.answer)


class _NoStatusMessages(StatusMessageProvider):  # type: ignore[misc]
    """Fleet reports tool calls and iterations as its own events; DSPy's status messages would also
    try to reach the stream from sandbox tool threads, which cannot."""

    def tool_start_status_message(self, instance: Any, inputs: dict[str, Any]) -> None:
        return None

    def tool_end_status_message(self, outputs: Any) -> None:
        return None

    def module_start_status_message(self, instance: Any, inputs: dict[str, Any]) -> None:
        return None

    def module_end_status_message(self, outputs: Any) -> None:
        return None

    def lm_start_status_message(self, instance: Any, inputs: dict[str, Any]) -> None:
        return None

    def lm_end_status_message(self, outputs: Any) -> None:
        return None


DELTA_EVENTS: dict[str, type[ReasoningDelta | CodeDelta]] = {"reasoning": ReasoningDelta, "code": CodeDelta}


async def stream_program(ctx: RouteContext, program: Any, predictor: Any, fields: tuple[str, ...]) -> Any:
    """Run ``program`` with DSPy streaming; pieces of ``fields`` written by ``predictor`` become delta events."""
    listeners = [StreamListener(name, predict=predictor, allow_reuse=True) for name in fields]
    for listener in listeners:
        identifiers = listener.adapter_identifiers
        identifiers.setdefault(type(ctx.adapter).__name__, identifiers[stream_as(ctx.adapter)])
    # The program runs as a coroutine on this turn's own event loop (``acall``), not through
    # ``asyncify``: asyncify shares one process-wide thread limiter between every loop, and with more
    # concurrent turns than its tokens a turn waits on another loop's future and never wakes. The
    # loop is private to the turn, so the program's blocking sandbox calls hold up nothing else.
    streaming = dspy.streamify(
        program,
        status_message_provider=_NoStatusMessages(),
        stream_listeners=listeners,
        include_final_prediction_in_output_stream=True,
        is_async_program=True,
    )
    # A JSON-style adapter streams each field's raw JSON (quotes, escapes): the deltas carry its text.
    decoders = {name: StreamedJsonString() for name in fields} if stream_as(ctx.adapter) == "JSONAdapter" else {}
    prediction = None
    async for chunk in streaming(**ctx.inputs):
        if isinstance(chunk, StreamResponse):
            name = chunk.signature_field_name
            decoder = decoders.get(name)
            text = decoder.feed(chunk.chunk) if decoder is not None else chunk.chunk
            if text:
                ctx.trace.emit_in_iteration(DELTA_EVENTS[name](text=text))
            if decoder is not None and chunk.is_last_chunk:
                decoder.reset()
        elif isinstance(chunk, dspy.Prediction):
            prediction = chunk
    if prediction is None:
        raise RuntimeError("the model program ended without a prediction")
    return prediction
