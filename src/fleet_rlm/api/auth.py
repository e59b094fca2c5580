"""Bearer-token authentication, on when ``FLEET_API_TOKEN`` is set (required off loopback)."""

from __future__ import annotations

import hmac
import ipaddress

from fastapi import Request

from fleet_rlm.api.errors import ApiError


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def require_token(request: Request) -> None:
    """Accepts ``Authorization: Bearer <token>`` or, for browsers' EventSource, ``?token=``."""
    expected = request.app.state.api_token
    if expected is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, supplied = header.partition(" ")
    if scheme.lower() != "bearer" or not supplied:
        supplied = request.query_params.get("token", "")
    if not supplied or not hmac.compare_digest(supplied.strip().encode(), expected.encode()):
        raise ApiError(401, "unauthorized", "a valid bearer token is required", {"WWW-Authenticate": "Bearer"})
