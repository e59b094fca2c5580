"""Serving a stored file: ``ETag`` and ``If-None-Match`` (304), and one byte range (206 or 416).

Starlette's FileResponse serves ranges itself, but answers a malformed ``Range`` with a plain-text
400, an unsatisfiable one with an empty plain-text 416, and several with ``multipart/byteranges``.
Here the route decides first (RFC 9110): a malformed or multi-part ``Range``, or one an ``If-Range``
rules out, is ignored and the whole file is served (200); one range inside the file gets 206; one
that starts past the end gets 416 with the API's JSON error and ``Content-Range: bytes */<size>``.
Only then does FileResponse run, seeing just the range that was accepted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from os import PathLike

from starlette.background import BackgroundTask
from starlette.datastructures import Headers
from starlette.responses import FileResponse
from starlette.types import Receive, Scope, Send

from fleet_rlm.api.errors import ApiError

_SINGLE_RANGE = re.compile(r"bytes=(?:([0-9]{1,18})-([0-9]{0,18})|-([0-9]{1,18}))")
_RANGE_HEADERS = (b"range", b"if-range")

RANGE_HEADER_DOC = {
    "name": "Range",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "One byte range (`bytes=0-99`, `bytes=100-`, `bytes=-100`): 206 with that part, or 416 "
    "when it starts past the end. A malformed range, or more than one, is ignored (200, the whole file).",
}
IF_RANGE_HEADER_DOC = {
    "name": "If-Range",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "The ETag the client holds: the range is served only if the file still has it, else the whole file",
}
IF_NONE_MATCH_HEADER_DOC = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "ETags (or `*`): 304 Not Modified when the file's ETag is among them",
}
CONTENT_RANGE_DOC = {"Content-Range": {"schema": {"type": "string"}, "description": "bytes <first>-<last>/<size>"}}
UNSATISFIED_RANGE_DOC = {"Content-Range": {"schema": {"type": "string"}, "description": "bytes */<size>"}}


def _entity_tags(header: str) -> list[str]:
    return [tag.strip().removeprefix("W/") for tag in header.split(",") if tag.strip()]


def none_match(headers: Headers, etag: str) -> bool:
    """``If-None-Match`` names ``etag`` (weak comparison) or is ``*``: the client's copy is current."""
    header = headers.get("if-none-match")
    if header is None:
        return False
    return header.strip() == "*" or etag in _entity_tags(header)


@dataclass(frozen=True)
class ByteRange:
    first: int
    last: int


def requested_range(headers: Headers, size: int, etag: str) -> ByteRange | None:
    """The one byte range to serve, or None for the whole file; raises 416 for a range past the end."""
    header = headers.get("range")
    if header is None:
        return None
    if_range = headers.get("if-range")
    if if_range is not None and if_range.strip() != etag:  # a strong match only (RFC 9110, 13.1.5)
        return None
    match = _SINGLE_RANGE.fullmatch(header.strip().replace(" ", ""))
    if match is None:
        return None
    first_text, last_text, suffix_text = match.groups()
    if suffix_text is not None:
        suffix = int(suffix_text)
        if suffix == 0 or size == 0:
            raise _unsatisfiable(size)
        return ByteRange(max(size - suffix, 0), size - 1)
    first = int(first_text)
    if last_text and int(last_text) < first:  # not a range: ignored
        return None
    if first >= size:
        raise _unsatisfiable(size)
    return ByteRange(first, min(int(last_text), size - 1) if last_text else size - 1)


def _unsatisfiable(size: int) -> ApiError:
    return ApiError(
        416,
        "range_not_satisfiable",
        f"the range starts past the end of the file ({size} bytes)",
        {"Content-Range": f"bytes */{size}"},
    )


NO_SCRIPT_HEADERS = {"Content-Security-Policy": "sandbox", "X-Content-Type-Options": "nosniff"}
"""On every stored file served: a file of the session (an artifact a turn wrote, an upload) is
untrusted. Opened directly on the app's origin (a link opened in a tab, a typed URL) it is a
download (``attachment``) and the type it was served as (``nosniff``); were a browser to render it
anyway, ``sandbox`` gives it an opaque origin where no script runs."""

NO_SCRIPT_HEADERS_DOC = {
    "Content-Security-Policy": {"schema": {"type": "string"}, "description": "`sandbox`: no script runs, ever"},
    "X-Content-Type-Options": {"schema": {"type": "string"}, "description": "`nosniff`"},
    "Content-Disposition": {"schema": {"type": "string"}, "description": "`attachment` with the file's name"},
}


class StoredFileResponse(FileResponse):
    """A FileResponse that serves exactly the range the route accepted (None: the whole file), as an
    ``attachment`` with :data:`NO_SCRIPT_HEADERS`."""

    def __init__(
        self,
        path: str | PathLike[str],
        *,
        byte_range: ByteRange | None,
        media_type: str,
        filename: str,
        headers: Mapping[str, str] | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        super().__init__(
            path,
            media_type=media_type,
            filename=filename,
            headers={**(headers or {}), **NO_SCRIPT_HEADERS},
            background=background,
            content_disposition_type="attachment",
        )
        self.byte_range = byte_range

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(name, value) for name, value in scope["headers"] if name not in _RANGE_HEADERS]
        if self.byte_range is not None:
            headers.append((b"range", f"bytes={self.byte_range.first}-{self.byte_range.last}".encode()))
        await super().__call__({**scope, "headers": headers}, receive, send)
