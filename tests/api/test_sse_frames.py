"""The SSE framing of a turn's events: a batch of events goes out in one write."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fleet_rlm.api.sse import _frames, event_frame
from fleet_rlm.protocol.events import Event, EventType

pytestmark = pytest.mark.anyio


def event(seq: int, kind: EventType = EventType.OUTPUT) -> Event:
    return Event(kind, seq, "turn_x", 1.0 + seq, "span_x", None, {"text": f"line {seq}"})


async def test_a_batch_goes_out_as_one_chunk_of_the_same_frames() -> None:
    async def batches() -> AsyncIterator[list[Event]]:
        yield [event(1, EventType.TURN_STARTED), event(2)]
        yield [event(3, EventType.TURN_COMPLETED)]

    chunks = [chunk async for chunk in _frames(batches())]
    assert len(chunks) == 3  # the retry hint, then one chunk per batch
    expected = [event_frame(e).encode() for e in (event(1, EventType.TURN_STARTED), event(2))]
    assert chunks[1] == b"".join(expected)
    assert chunks[2] == event_frame(event(3, EventType.TURN_COMPLETED)).encode()
