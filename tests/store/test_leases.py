"""The turn queue in the store, on SQLite and PostgreSQL: claims in order, never one turn twice,
leases renewed by their runner only, cancels flagged for the runner, lapsed leases found."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from sqlalchemy import event, update

from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.store import Conflict, Interrupting, LeaseRenewal, NewTurn, NotFound, Store
from fleet_rlm.store.submissions import create_together
from fleet_rlm.store.tables import EventRow, TurnRow, utcnow

pytestmark = pytest.mark.anyio


async def queued(store: Store, count: int) -> list[str]:
    ids = []
    for index in range(count):
        session = await store.create_session(name=f"s{index}")
        turn, _ = await store.create_turn(session.id, f"task {index}")
        ids.append(turn.id)
    return ids


async def test_claims_take_the_oldest_unclaimed_turn_first_and_none_twice(store: Store) -> None:
    ids = await queued(store, 6)
    claims = await asyncio.gather(*(store.claim_turn(f"w{i}:1:x", 10) for i in range(8)))
    claimed = [turn.id for turn in claims if turn is not None]
    assert sorted(claimed) == sorted(ids), "every turn claimed once, and only once"
    assert claims.count(None) == 2
    for turn in claims:
        if turn is not None:
            assert turn.runner is not None and turn.lease_expires_at is not None
            assert turn.lease_expires_at > utcnow()


async def test_a_lone_worker_claims_in_submission_order(store: Store) -> None:
    ids = await queued(store, 4)
    order = [(await store.claim_turn("w:1:x", 10)) for _ in ids]
    assert [turn.id for turn in order if turn is not None] == ids
    assert await store.claim_turn("w:1:x", 10) is None


async def test_a_batch_claim_takes_the_oldest_turns_with_their_sessions_in_one_transaction(store: Store) -> None:
    ids = await queued(store, 6)
    commits: list[int] = []
    event.listen(store.db.write_engine.sync_engine, "commit", lambda _connection: commits.append(1))
    first = await store.claim_turns("a:1:x", 10, limit=4)
    assert len(commits) == 1
    assert [claimed.turn.id for claimed in first] == ids[:4]
    for claimed in first:
        assert claimed.turn.runner == "a:1:x" and claimed.turn.lease_expires_at is not None
        assert claimed.session.id == claimed.turn.session_id
        assert claimed.session.name == f"s{ids.index(claimed.turn.id)}"
    rest = await store.claim_turns("b:1:x", 10, limit=4)
    assert [claimed.turn.id for claimed in rest] == ids[4:]
    assert await store.claim_turns("b:1:x", 10, limit=4) == []
    assert [(await store.get_turn(turn_id)).runner for turn_id in ids] == ["a:1:x"] * 4 + ["b:1:x"] * 2


async def test_batch_claims_made_at_once_never_take_a_turn_twice(store: Store) -> None:
    ids = await queued(store, 9)
    batches = await asyncio.gather(*(store.claim_turns(f"w{i}:1:x", 10, limit=4) for i in range(4)))
    claimed = [c.turn.id for batch in batches for c in batch]
    assert sorted(claimed) == sorted(ids), "every turn claimed once, and only once"
    for batch in batches:  # each batch in submission order
        assert [c.turn.id for c in batch] == sorted((c.turn.id for c in batch), key=ids.index)


async def test_a_claimed_or_running_turn_cannot_be_claimed_by_id(store: Store) -> None:
    (turn_id,) = await queued(store, 1)
    assert (await store.claim_turn("a:1:x", 10, turn_id=turn_id)) is not None
    assert await store.claim_turn("b:1:x", 10, turn_id=turn_id) is None
    assert (await store.get_turn(turn_id)).runner == "a:1:x"


async def test_only_the_runner_renews_its_lease_and_it_hears_of_cancels(store: Store) -> None:
    first, second = await queued(store, 2)
    for turn_id in (first, second):
        await store.claim_turn("mine:1:x", 1, turn_id=turn_id)
    before = (await store.get_turn(first)).lease_expires_at
    assert await store.renew_leases("thief:1:x", [first], 300) == LeaseRenewal(lost={first})
    assert (await store.get_turn(first)).lease_expires_at == before

    await store.request_cancel(second)
    assert await store.renew_leases("mine:1:x", [first, second], 300) == LeaseRenewal(cancelled={second})
    renewed = (await store.get_turn(first)).lease_expires_at
    assert renewed is not None and before is not None and renewed > before + dt.timedelta(seconds=200)


async def test_a_lease_renewal_does_not_wait_for_a_transaction_storing_the_turns_events(store: Store) -> None:
    """Storing an event holds its turn's key (the foreign key) until the transaction ends. Renewing a
    lease changes no key, so it does not wait for that: when it did (FOR UPDATE), the
    journal storing events of two turns and a renewal of both deadlocked, and PostgreSQL broke the
    cycle only after a second, a stall that every follower of the server's turns saw."""
    if store.db.is_sqlite:
        pytest.skip("SQLite has one writer at a time: transactions do not lock rows")
    first, second = await queued(store, 2)
    for turn_id in (first, second):
        await store.claim_turn("mine:1:x", 60, turn_id=turn_id)
    async with store.db.write() as storing:
        storing.add(EventRow(turn_id=first, seq=1, type="turn.started", ts=0.0, span_id="s", data={}))
        await storing.flush()
        renewal = store.renew_leases("mine:1:x", [first, second], 300)
        assert await asyncio.wait_for(renewal, 10) == LeaseRenewal()


async def test_a_renewal_tells_the_runner_of_its_turns_another_process_ended(store: Store) -> None:
    """A runner whose lease lapsed (the database out of its reach) while another process ended its turn
    learns it at its next renewal, and the turn stays ended."""
    ended, kept = await queued(store, 2)
    for turn_id in (ended, kept):
        await store.claim_turn("mine:1:x", 300, turn_id=turn_id)
        await store.mark_running(turn_id)
    await store.interrupt_turns(Interrupting(turn_ids={ended}), "lapsed")

    assert await store.renew_leases("mine:1:x", [ended, kept], 300) == LeaseRenewal(lost={ended})
    assert (await store.get_turn(ended)).status == "interrupted"
    assert (await store.get_turn(kept)).status == "running"


async def test_a_lapsed_lease_ends_the_turn_interrupted_but_a_renewed_one_is_left(store: Store) -> None:
    dead, alive = await queued(store, 2)
    for turn_id in (dead, alive):
        await store.claim_turn("w:1:x", 300, turn_id=turn_id)
        await store.mark_running(turn_id)
    async with store.db.write() as session:
        past = utcnow() - dt.timedelta(seconds=1)
        await session.execute(update(TurnRow).where(TurnRow.id == dead).values(lease_expires_at=past))

    assert [turn.id for turn in await store.active_turns(lease_lapsed=True)] == [dead]  # chosen in SQL
    interrupted = await store.interrupt_turns(Interrupting(lease_lapsed=True), "lapsed")
    assert [turn.id for turn in interrupted] == [dead]
    assert (await store.get_turn(dead)).status == "interrupted"
    assert (await store.get_turn(alive)).status == "running"
    events = await store.events_after(dead)
    assert [event.type.value for event in events] == ["turn.interrupted"]


async def test_a_queued_turn_nobody_claimed_is_never_lapsed(store: Store) -> None:
    (turn_id,) = await queued(store, 1)
    assert await store.interrupt_turns(Interrupting(lease_lapsed=True), "lapsed") == []
    assert (await store.get_turn(turn_id)).status == "queued"


async def a_second_turn_after(store: Store, runner: str, status: TurnStatus, name: str = "kept") -> str:
    """A session whose first turn ``runner`` ran to ``status``, and its second turn, queued."""
    session = await store.create_session(name=name)
    first, _ = await store.create_turn(session.id, "first")
    await store.claim_turn(runner, 10, turn_id=first.id)
    await store.mark_running(first.id)
    await store.finish_turn(first.id, status=status)
    second, _ = await store.create_turn(session.id, "second")
    return second.id


async def test_a_turn_is_left_to_the_runner_keeping_its_sessions_kernel_for_the_affinity_window(
    store: Store,
) -> None:
    second = await a_second_turn_after(store, "a:1:x", TurnStatus.COMPLETED)
    assert await store.kernel_holder((await store.get_turn(second)).session_id) == "a:1:x"
    assert await store.kernel_holder("kept") == "a:1:x"  # by the session's name too
    assert await store.kernel_holder("no-such-session") is None
    assert await store.claim_turn("b:1:x", 10, affinity_seconds=60) is None
    claimed = await store.claim_turn("a:1:x", 10, affinity_seconds=60)
    assert claimed is not None and claimed.id == second


async def test_after_the_window_or_without_one_any_runner_claims_it(store: Store) -> None:
    second = await a_second_turn_after(store, "a:1:x", TurnStatus.FAILED)
    assert await store.claim_turn("b:1:x", 10, affinity_seconds=60) is None
    old = utcnow() - dt.timedelta(seconds=61)
    async with store.db.write() as session:
        await session.execute(update(TurnRow).where(TurnRow.id == second).values(created_at=old))
    claimed = await store.claim_turn("b:1:x", 10, affinity_seconds=60)
    assert claimed is not None and claimed.id == second

    third = await a_second_turn_after(store, "c:1:x", TurnStatus.COMPLETED, name="other")
    claimed = await store.claim_turn("b:1:x", 10)
    assert claimed is not None and claimed.id == third


async def test_a_turn_after_an_interrupted_one_goes_to_anyone_at_once(store: Store) -> None:
    second = await a_second_turn_after(store, "gone:1:x", TurnStatus.INTERRUPTED)
    assert await store.kernel_holder((await store.get_turn(second)).session_id) is None
    claimed = await store.claim_turn("b:1:x", 10, affinity_seconds=60)
    assert claimed is not None and claimed.id == second


async def test_still_queued_names_the_turns_not_yet_started_even_claimed_ones_and_not_those_gone(store: Store) -> None:
    ids = await queued(store, 4)
    claimed = await store.claim_turns("w:1:x", 10, limit=2)
    assert [c.turn.id for c in claimed] == ids[:2]
    assert await store.mark_running(ids[0])
    assert await store.still_queued([*ids, "turn_gone"]) == set(ids[1:])
    many = [f"turn_{index}" for index in range(1200)]  # more than one read's worth
    assert await store.still_queued([*many, ids[3]]) == {ids[3]}


async def test_a_kernel_reset_voids_the_turns_started_so_far_and_is_refused_while_one_runs(store: Store) -> None:
    session = await store.create_session(name="s")
    assert await store.kernel_reset_after(session.id) == 0, "never restarted"
    first, _ = await store.create_turn(session.id, "first")
    await store.mark_running(first.id)
    with pytest.raises(Conflict) as busy:
        await store.reset_kernel(session.id)
    assert busy.value.code == "kernel_busy"
    assert await store.kernel_reset_after(session.id) == 0, "a refused reset changes nothing"

    await store.finish_turn(first.id, status="completed", answer="x")
    await store.create_turn(session.id, "second, still queued")
    await store.reset_kernel("s")
    assert await store.kernel_reset_after(session.id) == first.position, "the queued turn starts after the reset"
    with pytest.raises(NotFound):
        await store.reset_kernel("nope")


async def test_a_turn_submitted_while_a_kernel_reset_waits_is_locked_by_the_reset_made_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reset's first look at the session's turns could not see a turn whose submission had not
    committed; that submission holds the session's row, which the reset then waits for. Had the reset
    committed as it was, the new turn could start and read the old reset before it: the reset would be
    lost. It is made again, with the new turn locked too."""
    if store.db.is_sqlite:
        pytest.skip("SQLite has one writer at a time: transactions do not lock rows")
    session = await store.create_session(name="s")
    first, _ = await store.create_turn(session.id, "first")
    await store.finish_turn(first.id, status="completed", answer="x")
    attempts: list[int] = []
    once = store._reset_kernel_once

    async def counted(session_id: str) -> None:
        attempts.append(1)
        await once(session_id)

    monkeypatch.setattr(store, "_reset_kernel_once", counted)
    async with store.db.write() as submitting:
        await create_together(submitting, [NewTurn(session.id, "second")])
        reset = asyncio.create_task(store.reset_kernel(session.id))
        await asyncio.sleep(0.5)
        assert not reset.done(), "the reset did not wait for the submission holding the session's row"
    await asyncio.wait_for(reset, 10)
    assert len(attempts) == 2
    assert await store.kernel_reset_after(session.id) == first.position
