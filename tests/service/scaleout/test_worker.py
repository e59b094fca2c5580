"""A process's worker claims queued turns up to its room, as many as it has room for in one transaction,
on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import event

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.service.scaleout.worker import TurnWorker
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.store import Claimed, Database, Store
from fleet_rlm.testing.settings import SettingsFactory

pytestmark = pytest.mark.anyio


async def queue_turns(store: Store, count: int) -> list[str]:
    ids = []
    for index in range(count):
        session = await store.create_session(name=f"s{index}")
        ids.append((await store.create_turn(session.id, f"task {index}"))[0].id)
    return ids


async def until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "not reached in time"
        await asyncio.sleep(0.01)


async def test_a_worker_claims_what_it_has_room_for_in_one_transaction_and_more_as_room_frees(store: Store) -> None:
    ids = await queue_turns(store, 8)
    ran: list[Claimed] = []
    commits: list[int] = []
    event.listen(store.db.write_engine.sync_engine, "commit", lambda _connection: commits.append(1))
    worker = TurnWorker(store, "w:1:x", 5, lease_seconds=10, run=ran.append)
    worker.start()
    try:
        await until(lambda: len(ran) == 5)
        assert len(commits) == 1, "five claims, one transaction"
        assert [claimed.turn.id for claimed in ran] == ids[:5], "the oldest first"
        assert all(claimed.session.id == claimed.turn.session_id for claimed in ran)
        assert worker.held == 5 and not worker.reserve(), "full: no room for a turn submitted here"
        worker.release()  # one of its turns ended
        worker.release()
        await until(lambda: len(ran) == 7)
        assert [claimed.turn.id for claimed in ran[5:]] == ids[5:7]
        assert worker.held == 5
    finally:
        await worker.drain()
    assert (await store.get_turn(ids[7])).runner is None, "left queued for whoever has room"


async def test_a_worker_without_a_limit_claims_every_queued_turn(store: Store) -> None:
    ids = await queue_turns(store, 40)
    ran: list[Claimed] = []
    worker = TurnWorker(store, "w:1:x", None, lease_seconds=10, run=ran.append)
    worker.start()
    try:
        await until(lambda: len(ran) == 40)
        assert [claimed.turn.id for claimed in ran] == ids
        assert worker.held == 40
    finally:
        await worker.drain()


async def test_a_turn_whose_start_fails_keeps_only_its_own_room_the_others_still_run(store: Store) -> None:
    ids = await queue_turns(store, 3)
    ran: list[Claimed] = []

    def run(claimed: Claimed) -> None:
        if claimed.turn.id == ids[1]:
            raise RuntimeError("a bug in starting the turn")
        ran.append(claimed)

    worker = TurnWorker(store, "w:1:x", 3, lease_seconds=10, run=run)
    worker.start()
    try:
        await until(lambda: len(ran) == 2)
        await asyncio.sleep(0.2)
        assert [claimed.turn.id for claimed in ran] == [ids[0], ids[2]], "the turn after the failed one runs"
        assert worker.held == 2, "only the turns that started keep their room"
    finally:
        await worker.drain()


async def test_turns_claimed_as_the_worker_drains_are_given_back_to_the_queue(store: Store) -> None:
    ids = await queue_turns(store, 3)
    ran: list[Claimed] = []
    worker = TurnWorker(store, "w:1:x", 5, lease_seconds=10, run=ran.append)
    real_claim = store.claim_turns

    async def claim_then_sigterm(*args: Any, **kwargs: Any) -> list[Claimed]:
        claimed = await real_claim(*args, **kwargs)
        worker.draining = True  # SIGTERM arrived while the claim's transaction ran
        return claimed

    store.claim_turns = claim_then_sigterm  # type: ignore[method-assign]
    worker.start()
    await until(lambda: worker.draining)
    await worker.drain()
    assert ran == [] and worker.held == 0
    for turn_id in ids:
        turn = await store.get_turn(turn_id)
        assert turn.runner is None and turn.lease_expires_at is None, "queued for another worker to claim"
    assert [c.turn.id for c in await real_claim("other:1:x", 10, limit=5)] == ids


async def test_on_sqlite_the_server_runs_turns_itself_even_with_its_workers_turned_off(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, database_url: str
) -> None:
    """No other process can share an embedded database, so nothing else could run the turn."""
    if not database_url.startswith("sqlite"):
        pytest.skip("on PostgreSQL an API replica without workers leaves turns to fleet worker processes")
    settings = make_settings(worker_in_server=False)
    fleet = FleetService(settings, database=Database(str(settings.database_url)))
    await fleet.start()
    try:
        assert fleet.turns.worker is not None  # it runs turns
        await fleet.sessions.create(name="s")
        model_server.script("root", rlm_step("Answer.", "SUBMIT(answer='ran')"))
        turn, _ = await fleet.turns.submit("s", TurnSubmission(message="run me"))
        done = await asyncio.wait_for(fleet.turns.wait(turn.id), 60)
        assert (done.status, done.answer) == ("completed", "ran")
    finally:
        await fleet.stop()


async def test_a_worker_that_does_not_serve_the_queue_claims_only_the_turns_queued_here(store: Store) -> None:
    ids = await queue_turns(store, 3)
    ran: list[Claimed] = []
    worker = TurnWorker(store, "w:1:x", 5, lease_seconds=10, run=ran.append, serves_queue=False)
    worker.start()
    try:
        worker.queued_here(ids[1])
        await until(lambda: len(ran) == 1)
        await asyncio.sleep(1.5)  # longer than a poll
        assert [claimed.turn.id for claimed in ran] == [ids[1]]
    finally:
        await worker.drain()
    assert [(await store.get_turn(turn_id)).runner for turn_id in (ids[0], ids[2])] == [None, None]


async def test_a_process_that_ends_with_its_caller_runs_its_own_turns_and_no_other_clients(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    """``fleet mcp``, ``fleet eval run`` and ``fleet optimize`` end with their caller, and a turn they ran
    would end with them: they run their own turns, even those that waited for room, and leave the
    queue's others (older here) to the servers and workers."""
    settings = make_settings(max_running_turns=1)
    fleet = FleetService(settings, database=Database(str(settings.database_url)), serves_queue=False)
    await fleet.start()
    try:
        (theirs,) = await queue_turns(fleet.parts.store, 1)
        for name in ("first", "second"):
            await fleet.sessions.create(name=name)
            step = f"import time\ntime.sleep(1)\nSUBMIT(answer={name!r})"
            model_server.script_for_task("root", name, rlm_step("Answer.", step))
        first, _ = await fleet.turns.submit("first", TurnSubmission(message="first"))
        second, _ = await fleet.turns.submit("second", TurnSubmission(message="second"))
        assert (await fleet.parts.store.get_turn(second.id)).runner is None, "no room: queued"

        for turn in (first, second):
            done = await asyncio.wait_for(fleet.turns.wait(turn.id), 60)
            assert (done.status, done.answer, done.runner) == ("completed", turn.message, fleet.parts.runner)
        left = await fleet.parts.store.get_turn(theirs)
        assert (left.status, left.runner) == ("queued", None)
    finally:
        await fleet.stop()
