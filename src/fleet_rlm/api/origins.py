"""The ``Origin`` check: a browser page from another origin cannot change anything.

A page anywhere on the web can make the browser POST a form (or a fetch without CORS) to a Fleet on
127.0.0.1; the browser names the page's origin in ``Origin`` (and ``Sec-Fetch-Site``). A request that
changes state (POST, PUT, PATCH, DELETE) is refused with 403 when it comes from another origin,
unless the operator lists that origin in ``cors_origins``; those origins also get CORS headers
(Starlette's CORSMiddleware, installed inside this check). Same-origin pages (a web UI served by
this server) and clients that send no ``Origin`` (curl, the Python client) pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from fleet_rlm.api.errors import error_response
from fleet_rlm.config import origin_of

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
EXPOSED_HEADERS = ("ETag", "Location", "Content-Disposition")


def _normal_origin(value: str) -> str | None:
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    return origin_of(parts.scheme, parts.hostname, port)


def _authority(scheme: str, value: str) -> str | None:
    """``host[:port]`` normalised like an origin's, so the two compare."""
    origin = _normal_origin(f"{scheme}://{value}")
    return origin.split("://", 1)[1] if origin else None


def is_same_origin(origin: str, host_header: str) -> bool:
    """The page was served by this very host and port (the scheme follows the origin's: a TLS proxy
    in front of the server is invisible to it)."""
    normal = _normal_origin(origin)
    if normal is None:
        return False
    scheme, authority = normal.split("://", 1)
    return authority == _authority(scheme, host_header)


def is_preflight(method: str, headers: Headers) -> bool:
    return method == "OPTIONS" and "access-control-request-method" in headers


class OriginCheckMiddleware:
    def __init__(self, app: ASGIApp, cors_origins: Sequence[str]) -> None:
        self.allowed = frozenset(cors_origins)
        self.app: ASGIApp = app
        if self.allowed:
            self.app = CORSMiddleware(
                app,
                allow_origins=sorted(self.allowed),
                allow_methods=("*",),
                allow_headers=("*",),
                expose_headers=EXPOSED_HEADERS,
            )

    def _refused(self, method: str, headers: Headers) -> str | None:
        """Why the request is refused, or None."""
        origin = headers.get("origin")
        if origin is None:
            fetch_site = headers.get("sec-fetch-site", "")
            if method in STATE_CHANGING and fetch_site in ("cross-site", "same-site"):
                return f"a {fetch_site} browser request cannot change anything here"
            return None
        if _normal_origin(origin) in self.allowed or is_same_origin(origin, headers.get("host", "")):
            return None
        if method in STATE_CHANGING or is_preflight(method, headers):
            return (
                f"requests from the origin {origin[:100]!r} cannot change anything here; list it in FLEET_CORS_ORIGINS"
            )
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        reason = self._refused(scope["method"], Headers(scope=scope))
        if reason is not None:
            await error_response(403, "origin_not_allowed", reason, path=scope["path"])(scope, receive, send)
            return
        await self.app(scope, receive, send)
