"""The browser workbench: static ES modules and CSS served by ``fleet serve`` at ``/`` (docs/web.md).

The API layer may not import clients, so the API's app factory takes the UI's routes as a parameter
(:func:`fleet_rlm.api.app.create_app`'s ``ui_routes``); ``fleet serve`` and the server ``fleet chat``
and ``fleet web`` start pass :func:`routes`. The UI is served with a strict Content-Security-Policy
(no inline script or style, nothing from other origins, no framing).
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC = Path(__file__).parent / "static"
ASSETS_PREFIX = "/ui"
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' blob:",
        "connect-src 'self'",
        "form-action 'none'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
"""On every response of the UI (the page and its assets). ``no-cache`` revalidates each load, so a
server upgraded under an open tab never serves a page with modules of the old version."""


class _SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to each response of the wrapped app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(name.lower().encode(), value.encode()) for name, value in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def _index(_: Request) -> Response:
    return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)


def routes() -> list[BaseRoute]:
    """``GET /`` (the page) and ``/ui/...`` (its modules, styles and vendored files)."""
    assets = _SecurityHeaders(StaticFiles(directory=STATIC, follow_symlink=False))
    return [Route("/", _index, methods=["GET"], include_in_schema=False), Mount(ASSETS_PREFIX, app=assets)]
