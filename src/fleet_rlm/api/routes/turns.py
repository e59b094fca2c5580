from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response
from sse_starlette import EventSourceResponse

from fleet_rlm.api.deps import Service, Tickets, Turns
from fleet_rlm.api.errors import ErrorBody, Responses
from fleet_rlm.api.event_schemas import EVENT_STREAM_RESPONSE
from fleet_rlm.api.schemas import MAX_INT32, StreamTicket, TurnCreate, TurnOut, TurnPage
from fleet_rlm.api.sse import LAST_EVENT_ID_RULE, event_stream, last_event_seq, wants_event_stream
from fleet_rlm.service.turns.service import TurnSubmission

router = APIRouter(tags=["turns"])
TURN_LINKS = {
    name: {
        "operationId": operation,
        "parameters": {"turn_id": "$response.body#/id"},
        "description": "From the JSON body (a streamed answer names its turn in Location and each event)",
    }
    for name, operation in (
        ("GetTurn", "get_turn_api_v1_turns__turn_id__get"),
        ("CancelTurn", "cancel_turn_api_v1_turns__turn_id__cancel_post"),
        ("TurnEvents", "turn_events_api_v1_turns__turn_id__events_get"),
        ("StreamTicket", "stream_ticket_api_v1_turns__turn_id__events_ticket_post"),
    )
}
"""OpenAPI links from a submitted turn to what a client does next with it."""
STREAMED_TURN = EVENT_STREAM_RESPONSE["content"]
SUBMITTED_HEADERS = {
    "Location": {"schema": {"type": "string"}, "description": "The turn: /api/v1/turns/{turn_id}"},
    "Vary": {"schema": {"type": "string"}, "description": "Accept: the body is JSON or the event stream by it"},
}
SESSION_NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "No such session"}}
TURN_NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "No such turn"}}


@router.post(
    "/sessions/{session}/turns",
    status_code=202,
    response_model=TurnOut,
    responses={
        202: {
            "description": "The turn, queued; with `Accept: text/event-stream`, its events instead, streamed "
            "from its start to its end as from `GET /turns/{turn_id}/events`",
            "content": {**STREAMED_TURN},
            "headers": SUBMITTED_HEADERS,
            "links": TURN_LINKS,
        },
        200: {
            "model": TurnOut,
            "description": "The turn this Idempotency-Key already created (its events, when streamed)",
            "content": {**STREAMED_TURN},
            "headers": SUBMITTED_HEADERS,
            "links": TURN_LINKS,
        },
        400: {
            "model": ErrorBody,
            "description": "malformed_json: the body is not valid JSON; invalid_path: a context path is absolute, "
            f"has '..' or is otherwise refused; invalid_last_event_id: {LAST_EVENT_ID_RULE}",
        },
        409: {"model": ErrorBody, "description": "Another turn of the session is queued or running"},
        **SESSION_NOT_FOUND,
    },
)
async def submit_turn(
    session: str,
    body: TurnCreate,
    service: Service,
    request: Request,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
    last_event_id: Annotated[
        str | None,
        Header(
            description=f"The last event id seen (a retried streamed submission resumes after it; checked "
            f"whenever given, used only when streamed): {LAST_EVENT_ID_RULE}",
            json_schema_extra={"pattern": "^[0-9]{1,10}$"},
        ),
    ] = None,
) -> TurnOut | EventSourceResponse:
    """Start a turn; it runs detached from this request. Stream it from ``/turns/{id}/events``, or
    ask for ``Accept: text/event-stream`` (preferred over JSON) to have its events in this response:
    one request fewer before the first event. Either way a disconnect does not cancel the turn."""
    streamed = wants_event_stream(request.headers.get("accept"))
    after_seq = last_event_seq(last_event_id) if last_event_id is not None else 0
    submission = TurnSubmission(
        message=body.message,
        context_paths=body.context_paths,
        mode=body.mode,
        max_iterations=body.max_iterations,
        max_model_calls=body.max_model_calls,
        turn_timeout=body.turn_timeout,
    )
    turn, created = await service.turns.submit(session, submission, idempotency_key=idempotency_key)
    headers = {"Location": f"/api/v1/turns/{turn.id}", "Vary": "Accept"}
    status = 202 if created else 200
    if streamed:
        events = await service.turns.event_batches(turn.id, after_seq, submitted=True)
        heartbeat = service.settings.server.sse_heartbeat_seconds
        return event_stream(events, heartbeat, status_code=status, headers=headers, retry=False)
    response.headers.update(headers)
    response.status_code = status
    return TurnOut.of(turn)


@router.get("/sessions/{session}/turns", response_model=TurnPage, responses=SESSION_NOT_FOUND)
async def list_turns(
    session: str,
    service: Service,
    after: Annotated[int, Query(ge=0, le=MAX_INT32, description="Only turns after this position")] = 0,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> TurnPage:
    """The session's history, oldest first."""
    turns = await service.turns.in_session(session, after=after, limit=limit + 1)
    more = len(turns) > limit
    page = turns[:limit]
    return TurnPage(items=[TurnOut.of(t) for t in page], next_after=page[-1].position if more else None)


@router.get("/turns/{turn_id}", response_model=TurnOut, responses=TURN_NOT_FOUND)
async def get_turn(turn_id: str, turns: Turns) -> TurnOut:
    return TurnOut.of(await turns.get(turn_id))


@router.post(
    "/turns/{turn_id}/cancel",
    status_code=202,
    response_model=TurnOut,
    responses={**TURN_NOT_FOUND, 409: {"model": ErrorBody, "description": "The turn already ended"}},
)
async def cancel_turn(turn_id: str, turns: Turns) -> TurnOut:
    """Ask a queued or running turn to stop; it ends ``cancelled`` within about a second."""
    return TurnOut.of(await turns.cancel(turn_id))


@router.post("/turns/{turn_id}/events/ticket", status_code=201, response_model=StreamTicket, responses=TURN_NOT_FOUND)
async def stream_ticket(turn_id: str, request: Request, turns: Turns, tickets: Tickets) -> StreamTicket:
    """A ticket that opens this turn's event stream once, within 30 seconds, without the token:
    for browsers' ``EventSource``, which cannot send headers. Reconnecting takes a new ticket (and
    ``?after=`` the last id seen)."""
    await turns.get(turn_id)
    path = request.url.path.removesuffix("/ticket")
    ticket, expires = tickets.issue(path)
    return StreamTicket(
        ticket=ticket, expires_at=dt.datetime.fromtimestamp(expires, dt.UTC), url=f"{path}?ticket={ticket}"
    )


@router.get(
    "/turns/{turn_id}/events",
    response_class=EventSourceResponse,
    responses={
        200: EVENT_STREAM_RESPONSE,
        400: {"model": ErrorBody, "description": f"invalid_last_event_id: {LAST_EVENT_ID_RULE}"},
        **TURN_NOT_FOUND,
    },
)
async def turn_events(
    turn_id: str,
    service: Service,
    last_event_id: Annotated[
        str | None,
        Header(
            description=f"The last event id seen: {LAST_EVENT_ID_RULE}; it wins over ?after=",
            # Documented only: the route answers 400 invalid_last_event_id, not FastAPI's 422.
            json_schema_extra={"pattern": "^[0-9]{1,10}$"},
        ),
    ] = None,
    after: Annotated[int, Query(ge=0, le=MAX_INT32, description="Like Last-Event-ID: only events after this seq")] = 0,
    ticket: Annotated[
        str | None, Query(description="A stream ticket (POST .../events/ticket) instead of the bearer token")
    ] = None,
) -> EventSourceResponse:
    """Server-sent events: replay from the start (or after ``Last-Event-ID``), then live to the
    terminal event. A disconnect does not cancel the turn."""
    after_seq = last_event_seq(last_event_id) if last_event_id is not None else after
    events = await service.turns.event_batches(turn_id, after_seq)
    return event_stream(events, service.settings.server.sse_heartbeat_seconds)
