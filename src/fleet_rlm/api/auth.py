"""Who may call the API: with ``FLEET_API_TOKEN`` set, a bearer token on every route, or a stream
ticket (:mod:`fleet_rlm.api.tickets`) on the event stream it was issued for. The token itself is
never accepted in a URL."""

from __future__ import annotations

import hmac

from fastapi import Request

from fleet_rlm.api.errors import ApiError
from fleet_rlm.api.tickets import TicketBook

NO_TOKEN_IN_URL = (
    "the API token is not accepted in the URL (URLs end up in logs): send 'Authorization: Bearer <token>', "
    "or, from a browser's EventSource, a stream ticket from POST /api/v1/turns/{turn_id}/events/ticket"
)


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})


async def require_token(request: Request) -> None:
    expected: str | None = request.app.state.api_token
    if expected is None:
        return
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, supplied = header.partition(" ")
        if scheme.lower() != "bearer":
            raise _unauthorized("send the token as 'Authorization: Bearer <token>'")
        if hmac.compare_digest(supplied.strip().encode(), expected.encode()):
            return
        raise _unauthorized("the bearer token is wrong")
    ticket = request.query_params.get("ticket")
    if ticket is not None and request.method == "GET":
        tickets: TicketBook = request.app.state.tickets
        reason = tickets.redeem(ticket, request.url.path)
        if reason is None:
            return
        raise _unauthorized(f"the stream ticket {reason}; ask for a new one")
    if "token" in request.query_params:
        raise _unauthorized(NO_TOKEN_IN_URL)
    raise _unauthorized("a valid bearer token is required")
