"""Readers of queued turns: woken by one read that looks at every queued turn being waited on."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import pytest

from fleet_rlm.service.scaleout import wakeups
from fleet_rlm.service.scaleout.wakeups import Wakeups

pytestmark = pytest.mark.anyio


class Queue:
    """Stands for the store: which turns are queued, and the reads made of it."""

    def __init__(self, *queued: str) -> None:
        self.queued = set(queued)
        self.reads: list[list[str]] = []

    async def still_queued(self, turn_ids: Sequence[str]) -> set[str]:
        self.reads.append(sorted(turn_ids))
        return self.queued & set(turn_ids)


async def test_readers_of_queued_turns_are_woken_by_one_read_for_all_once_their_turn_leaves_the_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wakeups, "QUEUED_LOOK_SECONDS", 0.05)
    queue = Queue("a", "b", "c")
    waking = Wakeups(queue.still_queued)
    watches = [waking.watch(turn_id) for turn_id in ("a", "b", "c")]
    queued = [waking.while_queued(turn_id) for turn_id in ("a", "b", "c")]
    with contextlib.ExitStack() as stack:
        a, b, c = (stack.enter_context(watch) for watch in watches)
        for waiting in queued:
            stack.enter_context(waiting)
        await asyncio.sleep(0.2)
        assert not (a.woken.is_set() or b.woken.is_set() or c.woken.is_set())
        assert queue.reads and all(read == ["a", "b", "c"] for read in queue.reads)  # one read for all

        queue.queued -= {"b"}  # started (or ended, or gone) somewhere no wake-up came from
        await asyncio.wait_for(b.woken.wait(), 5)
        assert not (a.woken.is_set() or c.woken.is_set())
    await waking.close()


async def test_nothing_is_read_while_no_reader_waits_on_a_queued_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wakeups, "QUEUED_LOOK_SECONDS", 0.05)
    queue = Queue("a")
    waking = Wakeups(queue.still_queued)
    with waking.watch("a"), waking.while_queued("a"):
        await asyncio.sleep(0.2)
    reads = len(queue.reads)
    await asyncio.sleep(0.3)
    assert reads > 0 and len(queue.reads) == reads
    await waking.close()


async def test_a_failed_read_is_logged_and_the_next_one_still_wakes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(wakeups, "QUEUED_LOOK_SECONDS", 0.05)
    queue = Queue("a")
    failures = [OSError("database is gone for a moment")]

    async def flaky(turn_ids: Sequence[str]) -> set[str]:
        if failures:
            raise failures.pop()
        return await queue.still_queued(turn_ids)

    waking = Wakeups(flaky)
    queue.queued.clear()
    with waking.watch("a") as a, waking.while_queued("a"):
        await asyncio.wait_for(a.woken.wait(), 5)
    assert "looking at the queued turns streams wait on failed" in caplog.text
    await waking.close()
