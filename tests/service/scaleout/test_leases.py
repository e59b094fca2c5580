"""A process's lease keeper: it never ends a turn it runs itself, another process's sweep ends it once
its lease lapsed, and the runner hears of that at its next renewal."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import update

from fleet_rlm.service.scaleout.leases import LeaseKeeper
from fleet_rlm.store import Store, TurnRecord
from fleet_rlm.store.tables import TurnRow, utcnow

pytestmark = pytest.mark.anyio


def keeper(store: Store, runner: str, running: set[str], lost: list[str], ended: list[str]) -> LeaseKeeper:
    def interrupted(turn: TurnRecord) -> None:
        ended.append(turn.id)

    return LeaseKeeper(store, runner, 30, lambda: running, lambda _turn_id: None, interrupted, lost.append)


async def test_a_lapsed_lease_is_ended_by_another_process_not_by_its_runner_which_then_hears_of_it(
    store: Store,
) -> None:
    session = await store.create_session()
    turn, _ = await store.create_turn(session.id, "go")
    await store.claim_turn("runner:1:a", 30, turn_id=turn.id)
    await store.mark_running(turn.id)
    async with store.db.write() as transaction:  # the runner's event loop stood still, or the database was away
        past = utcnow() - dt.timedelta(seconds=1)
        await transaction.execute(update(TurnRow).where(TurnRow.id == turn.id).values(lease_expires_at=past))
    lost: list[str] = []
    ended_by_runner: list[str] = []
    ended_by_other: list[str] = []
    runner = keeper(store, "runner:1:a", {turn.id}, lost, ended_by_runner)
    other = keeper(store, "other:2:b", set(), [], ended_by_other)

    await runner.sweep()
    assert ended_by_runner == [] and (await store.get_turn(turn.id)).status == "running", "its own turn is renewed"
    await other.sweep()
    assert ended_by_other == [turn.id] and (await store.get_turn(turn.id)).status == "interrupted"
    await runner.renew()
    assert lost == [turn.id]
