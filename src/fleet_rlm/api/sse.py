"""Server-sent events: a turn's events as ``id:`` (seq), ``event:`` (type) and JSON ``data:``.

Framing, the ``retry:`` hint and heartbeats are sse-starlette's. A heartbeat (``event: heartbeat``
with a JSON body, no ``id:``, so it never moves ``Last-Event-ID``) goes out every
``sse_heartbeat_seconds`` (at most 15) to keep proxies and clients sure the connection lives.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Mapping

from sse_starlette import EventSourceResponse, ServerSentEvent

from fleet_rlm.api.errors import ApiError
from fleet_rlm.api.schemas import MAX_INT32
from fleet_rlm.protocol.events import Event, EventType

SEPARATOR = "\n"
EVENT_STREAM = "text/event-stream"
JSON_RANGES = frozenset({"application/json", "application/*", "*/*"})
RETRY_MS = 1000
CACHE_CONTROL = {"Cache-Control": "no-cache"}
"""sse-starlette sets ``Connection: keep-alive`` and ``X-Accel-Buffering: no`` itself."""
LAST_EVENT_ID_RULE = f"an event's seq, in ASCII digits 0-9, at most {MAX_INT32}"
_ASCII_DIGITS = re.compile(r"[0-9]{1,10}")


def last_event_seq(header: str) -> int:
    """The seq a ``Last-Event-ID`` header names; 400 for anything else (``str.isdigit`` would take "²")."""
    value = header.strip()
    if _ASCII_DIGITS.fullmatch(value) and int(value) <= MAX_INT32:
        return int(value)
    raise ApiError(400, "invalid_last_event_id", f"Last-Event-ID must be {LAST_EVENT_ID_RULE}; got {header[:40]!r}")


def _compact(data: object) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def event_frame(event: Event) -> ServerSentEvent:
    return ServerSentEvent(_compact(event.to_dict()), id=str(event.seq), event=event.type.value, sep=SEPARATOR)


def heartbeat_frame() -> ServerSentEvent:
    beat = {"type": EventType.HEARTBEAT.value, "ts": round(time.time(), 3)}
    return ServerSentEvent(_compact(beat), event=EventType.HEARTBEAT.value, sep=SEPARATOR)


async def _frames(batches: AsyncIterator[list[Event]], *, retry: bool = True) -> AsyncIterator[ServerSentEvent | bytes]:
    """The retry hint, then each batch of events as one chunk of frames: one write, not one per event."""
    if retry:
        yield ServerSentEvent(retry=RETRY_MS, sep=SEPARATOR)
    async for batch in batches:
        yield b"".join(event_frame(event).encode() for event in batch)


def event_stream(
    batches: AsyncIterator[list[Event]],
    heartbeat_seconds: float,
    *,
    status_code: int = 200,
    headers: Mapping[str, str] | None = None,
    retry: bool = True,
) -> EventSourceResponse:
    """The stream of a turn's event batches. ``retry``: begin with the reconnection hint, which tells an
    EventSource to reopen the stream by repeating its request: right for the GET, not for a submission
    (repeating a POST is for the client to decide, with its Idempotency-Key)."""
    return EventSourceResponse(
        _frames(batches, retry=retry),
        status_code=status_code,
        headers={**CACHE_CONTROL, **(headers or {})},
        ping=heartbeat_seconds,
        ping_message_factory=heartbeat_frame,
        sep=SEPARATOR,
    )


def wants_event_stream(accept: str | None) -> bool:
    """Whether an ``Accept`` header prefers ``text/event-stream`` to JSON: named with a higher weight
    than ``application/json``, ``application/*`` and ``*/*``. A tie, or no ``Accept``, is JSON."""
    stream = json_ = 0.0
    for media_range in (accept or "").split(","):
        media_type, *parameters = (part.strip() for part in media_range.split(";"))
        media_type = media_type.lower()
        if media_type == EVENT_STREAM:
            stream = max(stream, _quality(parameters))
        elif media_type in JSON_RANGES:
            json_ = max(json_, _quality(parameters))
    return stream > json_


def _quality(parameters: list[str]) -> float:
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "q":
            try:
                return float(value.strip())
            except ValueError:
                return 0.0  # a malformed weight asks for nothing
    return 1.0
