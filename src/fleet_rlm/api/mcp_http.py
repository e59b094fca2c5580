"""``/mcp`` on ``fleet serve``: the MCP server (:mod:`fleet_rlm.api.mcp_server`) over streamable
HTTP, behind the same token as every route (and, being part of the app, its Host, Origin and body
limit checks: the SDK's own DNS-rebinding check is left off, Fleet's runs first)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Request
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from fleet_rlm.api.auth import require_token
from fleet_rlm.api.body_limits import mcp_body_limit
from fleet_rlm.api.errors import ApiError, error_response
from fleet_rlm.api.mcp_server import build_mcp_server
from fleet_rlm.service.service import FleetService

MCP_PATH = "/mcp"


class _TokenGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await require_token(Request(scope))
        except ApiError as exc:
            await error_response(exc.status, exc.code, exc.message, exc.headers)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class McpEndpoint:
    """The route and what must run while the app does (the SDK's session manager)."""

    def __init__(self, service: FleetService) -> None:
        server = build_mcp_server(service)
        server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=mcp_body_limit(service.settings.server),
        )
        self._manager = server.session_manager
        self.route = Route(MCP_PATH, endpoint=_TokenGuard(StreamableHTTPASGIApp(self._manager)))

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self._manager.run():
            yield
