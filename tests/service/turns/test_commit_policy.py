"""A turn's final commit survives a database that blinks, and gives up on one that stays down."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from fleet_rlm.service.turns.execution import COMMIT_WAITS, commit_retrying
from fleet_rlm.store import Conflict, Store, TurnRecord

pytestmark = pytest.mark.anyio


async def running_turn(store: Store) -> TurnRecord:
    session = await store.create_session()
    turn, _ = await store.create_turn(session.id, "hello")
    assert await store.mark_running(turn.id)
    return turn


class BlinkingStore:
    """A real store whose ``finish_turn`` first fails ``failures`` times, as a dropped connection does."""

    def __init__(self, store: Store, failures: int) -> None:
        self.store = store
        self.failures = failures
        self.calls = 0

    async def finish_turn(self, turn_id: str, **end: Any) -> TurnRecord:
        self.calls += 1
        if self.calls <= self.failures:
            raise OperationalError("UPDATE turns", {}, ConnectionResetError("connection reset by peer"))
        return await self.store.finish_turn(turn_id, **end)


async def test_a_commit_that_fails_twice_lands_on_the_third_try(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    turn = await running_turn(store)
    blinking = BlinkingStore(store, failures=2)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="fleet_rlm.service.turns.execution"):
        await commit_retrying(turn.id)(blinking.finish_turn, turn.id, status="completed", answer="ok")
    assert time.monotonic() - started >= COMMIT_WAITS[0] + COMMIT_WAITS[1]
    assert blinking.calls == 3
    finished = await store.get_turn(turn.id)
    assert (finished.status, finished.answer) == ("completed", "ok")
    assert [r.getMessage() for r in caplog.records] == [f"turn {turn.id}: commit failed, retrying"] * 2


async def test_a_database_that_stays_down_fails_the_commit_after_every_wait(store: Store) -> None:
    turn = await running_turn(store)
    down = BlinkingStore(store, failures=100)
    started = time.monotonic()
    with pytest.raises(OperationalError):
        await commit_retrying(turn.id)(down.finish_turn, turn.id, status="completed", answer="ok")
    assert time.monotonic() - started >= sum(COMMIT_WAITS)
    assert down.calls == len(COMMIT_WAITS) + 1
    assert (await store.get_turn(turn.id)).status == "running"


async def test_a_turn_that_already_ended_is_not_retried(store: Store) -> None:
    turn = await running_turn(store)
    await store.finish_turn(turn.id, status="interrupted", error="the server restarted")
    once = BlinkingStore(store, failures=0)
    started = time.monotonic()
    with pytest.raises(Conflict):
        await commit_retrying(turn.id)(once.finish_turn, turn.id, status="completed", answer="late")
    assert once.calls == 1 and time.monotonic() - started < COMMIT_WAITS[0]
    assert (await store.get_turn(turn.id)).status == "interrupted"
