"""The OpenAI-compatible API: ``GET /v1/models`` and ``POST /v1/chat/completions`` (docs/integrations.md).

Outside ``/api/v1`` (OpenAI clients take a base URL ending in ``/v1``), behind the same token and
rules; errors in OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from fleet_rlm.api.compat import CompletionCall, model_list
from fleet_rlm.api.compat_schemas import CHUNK_STREAM, ChatCompletion, ChatCompletionRequest, ModelList
from fleet_rlm.api.deps import Service
from fleet_rlm.api.errors import OpenAIErrorBody, Responses
from fleet_rlm.api.sse import CACHE_CONTROL, SEPARATOR

router = APIRouter(tags=["openai-compatible"])

_STRING = {"schema": {"type": "string"}}
CALL_HEADERS = {
    "X-Fleet-Session": {**_STRING, "description": "The session the turn ran in (an ephemeral one is deleted after)"},
    "X-Fleet-Turn": {**_STRING, "description": "The turn: GET /api/v1/turns/{turn_id} for its details"},
}
STREAM_DESCRIPTION = (
    "server-sent events, each `data:` a ChatCompletionChunk (the role, then the turn's "
    "activity as `reasoning_content`, then the answer as `content`, the finish reason, the usage when "
    "stream_options.include_usage) and `data: [DONE]` last; a turn that ends without an answer sends "
    'one `data: {"error": {...}}` instead. Comment lines (`: ping`) keep a quiet connection open.'
)


def _error(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"model": OpenAIErrorBody, "description": description}
    if headers:
        response["headers"] = headers
    return response


COMPLETION_RESPONSES: Responses = {
    200: {
        "model": ChatCompletion,
        "description": "The completion (stream=false) or, with stream=true: " + STREAM_DESCRIPTION,
        "headers": CALL_HEADERS,
        "content": {"text/event-stream": CHUNK_STREAM},
    },
    400: _error(
        "malformed_json; invalid_messages: the last message is not a non-empty user message; unsupported_content: "
        "a content part that is not text; invalid_session_name: X-Fleet-Session or user is not a session id "
        "and not a valid session name"
    ),
    404: _error("model_not_found: not one of GET /v1/models; session_not_found: no session with that id"),
    409: _error("turn_in_progress: the bound session already runs a turn"),
    422: _error("invalid_request or invalid_settings: a field is missing, of the wrong type or out of range"),
    500: _error(
        "turn_failed, turn_cancelled, turn_interrupted: the turn ended without an answer (X-Should-Retry: false: "
        "running it again is the caller's choice); internal_error: a bug",
        {"X-Should-Retry": {**_STRING, "description": "false"}},
    ),
}


@router.get("/v1/models", response_model=ModelList)
async def list_models() -> ModelList:
    """``fleet-rlm`` (the session's mode, else the server's) and ``fleet-rlm/<mode>`` for each mode."""
    return model_list()


async def _disconnected(request: Request) -> None:
    """Return when the client closes the connection (the body was read before the route ran)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _frames(call: CompletionCall) -> AsyncIterator[ServerSentEvent]:
    finished = False
    try:
        async for data in call.chunks():
            yield ServerSentEvent(data, sep=SEPARATOR)
        finished = True
    finally:
        if not finished:
            call.abandon()


@router.post(
    "/v1/chat/completions",
    response_model=None,
    responses=COMPLETION_RESPONSES,
)
async def chat_completions(
    body: ChatCompletionRequest,
    request: Request,
    service: Service,
    x_fleet_session: Annotated[
        str | None,
        Header(max_length=200, description="A session id or name to run the turn in (created if the name is new)"),
    ] = None,
) -> Response:
    """One turn: the last user message is the task, the messages before it the history. A client
    that disconnects cancels the turn."""
    call = await CompletionCall.start(service, body, x_fleet_session)
    if body.stream:
        return EventSourceResponse(
            _frames(call),
            headers={**CACHE_CONTROL, **call.headers},
            ping=service.settings.server.sse_heartbeat_seconds,
            sep=SEPARATOR,
        )
    completing = asyncio.ensure_future(call.complete())
    leaving = asyncio.ensure_future(_disconnected(request))
    await asyncio.wait({completing, leaving}, return_when=asyncio.FIRST_COMPLETED)
    leaving.cancel()
    if not completing.done():
        call.abandon()
        completing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await completing
        return Response(status_code=499)  # nobody reads it: the client has gone
    completion: ChatCompletion = completing.result()
    return JSONResponse(completion.model_dump(mode="json"), headers=call.headers)
