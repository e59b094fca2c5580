from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from fleet_rlm.service.kernels.lanes import ThreadLane

pytestmark = pytest.mark.anyio

CALLER = contextvars.ContextVar("caller", default="none")


def where() -> tuple[str, str]:
    return threading.current_thread().name, CALLER.get()


async def test_work_runs_on_the_lanes_threads_with_the_callers_context() -> None:
    lane = ThreadLane(2, "fleet-test-lane")
    CALLER.set("the turn")
    try:
        thread, caller = await lane.run(where)
    finally:
        lane.close()
    assert thread.startswith("fleet-test-lane") and caller == "the turn"


async def test_a_held_lane_does_not_hold_the_default_executor() -> None:
    lane = ThreadLane(1, "fleet-test-lane")
    release = threading.Event()
    held = asyncio.ensure_future(lane.run(release.wait, 30))
    try:
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), 10) == "free"
        assert not held.done()
    finally:
        release.set()
        await held
        lane.close()


async def test_work_after_close_still_runs() -> None:
    """Work still in flight when the service stops (a turn past its grace tearing down its sandbox)."""
    lane = ThreadLane(1, "fleet-test-lane")
    lane.close()
    thread, _ = await lane.run(where)
    assert not thread.startswith("fleet-test-lane")
