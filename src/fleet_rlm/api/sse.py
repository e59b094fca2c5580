"""Server-sent events: a turn's events as ``id:`` (seq), ``event:`` (type) and JSON ``data:``.

Heartbeats (``event: heartbeat``, no ``id:``, so they never move ``Last-Event-ID``) keep proxies and
clients sure the connection lives while a turn is quiet.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

from fastapi.responses import StreamingResponse

from fleet_rlm.protocol.events import Event

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "Connection": "keep-alive"}
RETRY_MS = 1000


def encode_event(event: Event) -> bytes:
    data = json.dumps(event.to_dict(), separators=(",", ":"), ensure_ascii=False)
    return f"id: {event.seq}\nevent: {event.type.value}\ndata: {data}\n\n".encode()


def encode_heartbeat() -> bytes:
    return f'event: heartbeat\ndata: {{"type":"heartbeat","ts":{time.time():.3f}}}\n\n'.encode()


async def _frames(events: AsyncIterator[Event | None]) -> AsyncIterator[bytes]:
    yield f"retry: {RETRY_MS}\n\n".encode()
    async for item in events:
        yield encode_heartbeat() if item is None else encode_event(item)


def event_stream(events: AsyncIterator[Event | None]) -> StreamingResponse:
    return StreamingResponse(_frames(events), media_type="text/event-stream", headers=SSE_HEADERS)
