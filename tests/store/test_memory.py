"""Reviewed memory in the store: proposals are rows of their own, so turns proposing at once never
lose each other's; reviews, the pending cap, and origins that outlive a deleted session."""

from __future__ import annotations

import asyncio

import pytest

from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.store import Conflict, Invalid, NotFound, Store

pytestmark = pytest.mark.anyio


async def finished_turn(store: Store, session_id: str, message: str) -> str:
    turn, _ = await store.create_turn(session_id, message)
    await store.finish_turn(turn.id, status=TurnStatus.COMPLETED, answer="ok")
    return turn.id


async def test_two_turns_of_one_session_proposing_at_once_keep_every_proposal(store: Store) -> None:
    session = await store.create_session(name="s")
    first = await finished_turn(store, session.id, "one")
    second, _ = await store.create_turn(session.id, "two")  # one finished, one still active
    proposals = [(turn, f"fact {turn[-4:]} {n}") for turn in (first, second.id) for n in range(15)]

    async def propose(turn_id: str, text: str) -> bool:
        _, created = await store.propose_memory(text, "why", session_id=session.id, turn_id=turn_id, max_pending=100)
        return created

    created = await asyncio.gather(*(propose(turn, text) for turn, text in proposals))
    assert all(created)
    stored = await store.list_memories(session_id=session.id)
    assert sorted((m.turn_id, m.text) for m in stored) == sorted(proposals)
    assert {m.status for m in stored} == {"pending"} and len({m.id for m in stored}) == 30


async def test_the_same_text_proposed_at_once_is_stored_once(store: Store) -> None:
    results = await asyncio.gather(
        *(store.propose_memory("north leads", "", session_id=None, turn_id=None, max_pending=100) for _ in range(8))
    )
    assert sum(created for _, created in results) == 1
    assert len({record.id for record, _ in results}) == 1


async def test_the_pending_cap_holds_under_concurrent_proposals(store: Store) -> None:
    async def propose(n: int) -> bool:
        try:
            await store.propose_memory(f"fact {n}", "", session_id=None, turn_id=None, max_pending=5)
        except Conflict as exc:
            assert exc.code == "memory_queue_full"
            return False
        return True

    assert sum(await asyncio.gather(*(propose(n) for n in range(12)))) == 5
    assert len(await store.list_memories(status="pending")) == 5
    entry = (await store.list_memories())[0]
    await store.review_memory(entry.id, "approved")  # reviewing frees a place
    assert await propose(99)


async def test_reviews_approve_edit_reject_and_delete(store: Store) -> None:
    one, _ = await store.propose_memory("one", "a", session_id=None, turn_id=None, max_pending=9)
    two, _ = await store.propose_memory("two", "b", session_id=None, turn_id=None, max_pending=9)
    three, _ = await store.propose_memory("three", "c", session_id=None, turn_id=None, max_pending=9)
    approved = await store.review_memory(two.id, "approved", text="two, edited")
    assert (approved.status, approved.text, approved.why) == ("approved", "two, edited", "b")
    assert approved.reviewed_at is not None
    await store.review_memory(one.id, "approved")
    await store.review_memory(three.id, "rejected")
    assert [m.text for m in await store.approved_memories()] == ["two, edited", "one"]  # in order of approval
    assert [m.text for m in await store.list_memories(status="rejected")] == ["three"]
    again, created = await store.propose_memory("three", "x", session_id=None, turn_id=None, max_pending=9)
    assert not created and again.status == "rejected"
    await store.delete_memory(three.id)
    with pytest.raises(NotFound) as gone:
        await store.get_memory(three.id)
    assert gone.value.code == "memory_not_found"
    with pytest.raises(Invalid):
        await store.review_memory(one.id, "pending")
    with pytest.raises(Invalid):
        await store.list_memories(status="forgotten")


async def test_entries_outlive_the_session_that_proposed_them(store: Store) -> None:
    session = await store.create_session(name="gone")
    turn = await finished_turn(store, session.id, "m")
    entry, _ = await store.propose_memory("kept", "", session_id=session.id, turn_id=turn, max_pending=9)
    await store.review_memory(entry.id, "approved")
    await store.delete_session("gone")
    kept = await store.get_memory(entry.id)
    assert (kept.text, kept.status, kept.session_id, kept.turn_id) == ("kept", "approved", None, None)
