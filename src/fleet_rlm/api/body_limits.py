"""Every request body is bounded while it streams in.

A declared ``Content-Length`` over the limit is refused before the route runs; a body without one
(chunked) is counted as it arrives and cut off at the limit: the route stops reading, the client gets
413 with ``Connection: close`` and the rest is never spooled or stored. Uploads and session imports
have their own (larger) limits; every other body is JSON and gets ``json_body_limit_kb``. FastAPI
parses the multipart forms (``UploadFile``, spooled to disk) from the counted stream, so an upload
cut off here leaves nothing behind.

Before answering, at most :data:`DRAIN_BYTES` more of the body are read and dropped (for at most
:data:`DRAIN_SECONDS`): a client a little over the limit is usually still sending, and closing on
unread bytes resets the connection, so it would see "connection reset" instead of the 413.
Starlette's and FastAPI's own body limits answer in plain text on some paths, hence this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fleet_rlm.api.errors import error_response
from fleet_rlm.config import ServerSettings

MIB = 1024 * 1024
DRAIN_BYTES = MIB
DRAIN_SECONDS = 2.0
MULTIPART_OVERHEAD = 64 * 1024
"""Allowance for the headers and boundaries around an upload's file part."""
CLOSE = {"Connection": "close"}


@dataclass(frozen=True)
class BodyLimit:
    size: int
    code: str
    message: str


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` inside a route; routes re-raise it and the error handlers render it."""

    def __init__(self, limit: BodyLimit) -> None:
        super().__init__(413, limit.message, CLOSE)
        self.code = limit.code


LimitFor = Callable[[str, str], BodyLimit]


def mcp_body_limit(server: ServerSettings) -> int:
    """An MCP message may carry an upload (``upload_file``), base64-encoded: a third larger."""
    return server.upload_limit_mb * MIB * 4 // 3 + MULTIPART_OVERHEAD


def route_limits(server: ServerSettings, prefix: str) -> LimitFor:
    """The limit of each route: by method and path."""
    upload_mb, import_mb, json_kb = server.upload_limit_mb, server.import_limit_mb, server.json_body_limit_kb
    upload = BodyLimit(
        upload_mb * MIB + MULTIPART_OVERHEAD,
        "upload_too_large",
        f"the upload is larger than the limit of {upload_mb} MiB (FLEET_UPLOAD_LIMIT_MB)",
    )
    archive = BodyLimit(
        import_mb * MIB + MULTIPART_OVERHEAD,
        "archive_too_large",
        f"the archive is larger than the limit of {import_mb} MiB (FLEET_IMPORT_LIMIT_MB)",
    )
    body = BodyLimit(
        json_kb * 1024,
        "body_too_large",
        f"the request body is larger than the limit of {json_kb} KiB (FLEET_JSON_BODY_LIMIT_KB)",
    )
    mcp = BodyLimit(
        mcp_body_limit(server),
        "body_too_large",
        f"the MCP message is larger than an upload of {upload_mb} MiB, base64-encoded (FLEET_UPLOAD_LIMIT_MB)",
    )
    upload_path = re.compile(rf"{re.escape(prefix)}/sessions/[^/]+/files")
    import_path = f"{prefix}/sessions/import"

    def limit_for(method: str, path: str) -> BodyLimit:
        if method == "POST" and path == import_path:
            return archive
        if method == "POST" and upload_path.fullmatch(path):
            return upload
        if method == "POST" and path == "/mcp":
            return mcp
        return body

    return limit_for


async def _drain(receive: Receive, more_body: bool, up_to: int = DRAIN_BYTES) -> None:
    """Read and drop the rest of the body, at most ``up_to`` bytes and :data:`DRAIN_SECONDS`."""
    drained = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DRAIN_SECONDS):
            while more_body and drained <= up_to:
                message = await receive()
                if message["type"] != "http.request":
                    return
                drained += len(message.get("body", b""))
                more_body = bool(message.get("more_body", False))


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, limit_for: LimitFor) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["method"], scope["path"])
        headers = Headers(scope=scope)
        declared = headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > limit.size:
            waits_for_go_ahead = headers.get("expect", "").lower() == "100-continue"
            if int(declared) <= limit.size + DRAIN_BYTES and not waits_for_go_ahead:
                await _drain(receive, more_body=True, up_to=int(declared))
            await error_response(413, limit.code, limit.message, CLOSE, path=scope["path"])(scope, receive, send)
            return
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit.size:
                    await _drain(receive, bool(message.get("more_body", False)))
                    raise BodyTooLarge(limit)
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except BodyTooLarge:
            if started:
                raise
            await error_response(413, limit.code, limit.message, CLOSE, path=scope["path"])(scope, receive, send)
