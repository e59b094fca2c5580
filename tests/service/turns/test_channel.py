"""A turn's live channel hands each follower what was published since it last looked, in one batch,
so a stream sends it in one write (fewer sends through the server's event loop under load)."""

from __future__ import annotations

import asyncio

import pytest

from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.service.turns.channel import FOLLOW_BATCH, TurnChannel

pytestmark = pytest.mark.anyio


def event(seq: int, kind: EventType = EventType.OUTPUT) -> Event:
    return Event(kind, seq, "turn_x", 1.0 + seq, "span_x", None, {"text": f"line {seq}"})


async def test_events_published_together_reach_a_follower_as_one_batch_in_order() -> None:
    channel = TurnChannel("turn_x")
    channel.publish(event(1, EventType.TURN_STARTED))
    batches = channel.follow()
    assert [e.seq for e in await anext(batches)] == [1]
    waiting = asyncio.ensure_future(anext(batches))
    await asyncio.sleep(0)
    for seq in (2, 3, 4):
        channel.publish(event(seq))
    assert [e.seq for e in await waiting] == [2, 3, 4]
    channel.publish(event(5, EventType.TURN_COMPLETED))
    assert [e.seq for e in await anext(batches)] == [5]
    with pytest.raises(StopAsyncIteration):
        await anext(batches)


async def test_a_late_follower_replays_after_its_last_seq_in_bounded_batches() -> None:
    channel = TurnChannel("turn_x")
    total = FOLLOW_BATCH * 2 + 10
    for seq in range(1, total + 1):
        channel.publish(event(seq, EventType.TURN_COMPLETED if seq == total else EventType.OUTPUT))
    sizes, seqs = [], []
    async for batch in channel.follow(after_seq=7):
        sizes.append(len(batch))
        seqs.extend(e.seq for e in batch)
    assert seqs == list(range(8, total + 1))
    assert max(sizes) <= FOLLOW_BATCH
