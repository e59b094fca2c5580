"""Reading a turn's event stream in tests with httpx-sse: the event frames only (the ``retry:`` hint
and heartbeats skipped), as ``(id, event, data)`` where a test compares whole streams."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
from httpx_sse import EventSource, ServerSentEvent

from fleet_rlm.protocol.events import EventType


def is_event(frame: ServerSentEvent) -> bool:
    return bool(frame.data) and frame.event != EventType.HEARTBEAT.value


def event_frames(response: httpx.Response) -> Iterator[ServerSentEvent]:
    return (frame for frame in EventSource(response).iter_sse() if is_event(frame))


async def aevent_frames(response: httpx.Response) -> AsyncIterator[ServerSentEvent]:
    async for frame in EventSource(response).aiter_sse():
        if is_event(frame):
            yield frame


def wire(frames: list[ServerSentEvent]) -> list[tuple[str, str, str]]:
    return [(frame.id, frame.event, frame.data) for frame in frames]
