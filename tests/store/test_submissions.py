"""Turns submitted together are queued in one transaction, on SQLite and PostgreSQL, each answered as if
it had been submitted alone."""

from __future__ import annotations

import pytest
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError

from fleet_rlm.config import Ceilings
from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.store import Conflict, Invalid, NewTurn, NotFound, Queued, Store, TurnRecord

pytestmark = pytest.mark.anyio


def counting_commits(store: Store) -> list[int]:
    commits: list[int] = []
    event.listen(store.db.write_engine.sync_engine, "commit", lambda _connection: commits.append(1))
    return commits


async def test_turns_of_many_sessions_are_queued_in_one_transaction(store: Store) -> None:
    sessions = [await store.create_session(name=f"s{index}") for index in range(5)]
    await store.create_turn(sessions[0].id, "earlier")
    await store.finish_turn((await store.list_turns(sessions[0].id))[0].id, status=TurnStatus.COMPLETED, answer="ok")
    commits = counting_commits(store)

    answers = await store.create_turns([NewTurn(s.id, f"task {i}") for i, s in enumerate(sessions)])

    assert len(commits) == 1
    turns = [answer[0] for answer in answers if isinstance(answer, tuple)]
    assert [answer[1] for answer in answers if isinstance(answer, tuple)] == [True] * 5
    assert [turn.message for turn in turns] == [f"task {i}" for i in range(5)]
    assert [turn.position for turn in turns] == [2, 1, 1, 1, 1]  # after the session's earlier turn
    assert all(turn.status is TurnStatus.QUEUED and turn.created_at is not None for turn in turns)
    for session, turn in zip(sessions, turns, strict=True):
        assert await store.get_turn(turn.id) == turn
        assert (await store.get_session(session.id)).updated_at >= session.updated_at


async def test_each_refused_submission_gets_its_own_error_and_the_others_are_queued(store: Store) -> None:
    busy = await store.create_session(name="busy")
    running, _ = await store.create_turn(busy.id, "still going")
    free = await store.create_session(name="free")
    keyed = await store.create_session(name="keyed")
    first_keyed, _ = await store.create_turn(keyed.id, "keyed task", idempotency_key="k1")
    await store.finish_turn(first_keyed.id, status=TurnStatus.COMPLETED, answer="done")

    answers = await store.create_turns(
        [
            NewTurn("busy", "another"),  # by name, and its session has a turn in progress
            NewTurn("no-such-session", "lost"),
            NewTurn(free.id, "first of two"),
            NewTurn(free.id, "second of two"),  # the first, just queued, is in progress
            NewTurn(keyed.id, "keyed task", idempotency_key="k1"),  # the same request again
            NewTurn(keyed.id, "something else", idempotency_key="k1"),  # the key reused for another
        ]
    )

    conflict, missing, queued, second, repeated, reused = answers
    assert isinstance(conflict, Conflict) and conflict.code == "turn_in_progress" and running.id in str(conflict)
    assert isinstance(missing, NotFound) and "no-such-session" in str(missing)
    assert isinstance(queued, tuple) and queued[1] is True and queued[0].message == "first of two"
    assert isinstance(second, Conflict) and queued[0].id in str(second)
    first_keyed_now = await store.get_turn(first_keyed.id)
    assert isinstance(repeated, tuple) and repeated == (first_keyed_now, False, await store.get_session(keyed.id))
    assert first_keyed_now.status is TurnStatus.COMPLETED
    assert isinstance(reused, Invalid) and reused.code == "idempotency_key_reused"
    assert [turn.message for turn in await store.list_turns(free.id)] == ["first of two"]
    assert [turn.message for turn in await store.list_turns(busy.id)] == ["still going"]


async def test_one_key_twice_in_a_batch_creates_one_turn(store: Store) -> None:
    session = await store.create_session(name="twice")
    first, again = await store.create_turns(
        [NewTurn(session.id, "task", idempotency_key="same"), NewTurn(session.id, "task", idempotency_key="same")]
    )
    assert isinstance(first, tuple) and isinstance(again, tuple)
    assert first[1] is True and again[1] is False
    assert again[0].id == first[0].id
    assert len(await store.list_turns(session.id)) == 1


async def test_a_batch_that_trips_on_a_constraint_queues_each_alone(store: Store) -> None:
    """A turn id already taken (as a concurrent writer's insert would) fails the batch's transaction: each
    submission is then stored alone and answered by itself."""
    taken = await store.create_session(name="taken")
    existing, _ = await store.create_turn(taken.id, "already there")
    await store.finish_turn(existing.id, status=TurnStatus.COMPLETED, answer="ok")
    other = await store.create_session(name="other")

    answers = await store.create_turns([NewTurn(other.id, "fine"), NewTurn(taken.id, "clash", turn_id=existing.id)])

    fine, clash = answers
    assert isinstance(fine, tuple) and fine[1] is True
    assert isinstance(await store.get_turn(fine[0].id), TurnRecord)
    assert isinstance(clash, IntegrityError)  # its own failure, raised to its caller alone: nothing of it stored
    assert [turn.message for turn in await store.list_turns(taken.id)] == ["already there"]


async def test_a_session_past_the_ceilings_gets_its_own_refusal_and_queues_nothing(store: Store) -> None:
    """The session's settings are checked as the batch's transaction reads them: a session stored above
    a ceiling since lowered is refused, naming the setting; the batch's other submission is queued, its
    answer carrying its session."""
    strict = await store.create_session(name="strict", settings={"max_iterations": 50})
    fine = await store.create_session(name="fine", settings={"max_iterations": 10})
    ceilings = Ceilings(max_iterations=10)

    refused, queued = await store.create_turns(
        [NewTurn("strict", "too much", ceilings=ceilings), NewTurn("fine", "ok", ceilings=ceilings)]
    )

    assert isinstance(refused, Invalid) and refused.code == "invalid_settings"
    assert "this session's setting 'max_iterations': 50 is above this server's maximum of 10" in refused.message
    assert isinstance(queued, Queued) and queued.created and queued.turn.message == "ok"
    assert queued.session.id == fine.id and queued.session.updated_at >= fine.updated_at
    assert await store.list_turns(strict.id) == []


async def test_a_submission_that_takes_its_turn_decides_with_the_runner_keeping_the_sessions_kernel(
    store: Store,
) -> None:
    """The runner of each session's last turn (the one likely keeping its kernel) is read in the batch's
    transaction: a submission claims its turn, or leaves it queued for that runner, accordingly."""
    names = ("kept-elsewhere", "kept-here", "interrupted", "new")
    sessions = {name: await store.create_session(name=name) for name in names}
    for name, runner, status in (
        ("kept-elsewhere", "b:2:x", TurnStatus.COMPLETED),
        ("kept-here", "a:1:x", TurnStatus.FAILED),
        ("interrupted", "b:2:x", TurnStatus.INTERRUPTED),
    ):
        turn, _ = await store.create_turn(sessions[name].id, "earlier", runner=runner, lease_seconds=10)
        await store.finish_turn(turn.id, status=status, answer="ok")
    commits = counting_commits(store)

    answers = await store.create_turns(
        [NewTurn(name, "next", runner="a:1:x", lease_seconds=10, kernel_affinity=True) for name in names]
    )

    assert len(commits) == 1
    runners = {
        name: answer.turn.runner for name, answer in zip(names, answers, strict=True) if isinstance(answer, Queued)
    }
    assert runners == {"kept-elsewhere": None, "kept-here": "a:1:x", "interrupted": "a:1:x", "new": "a:1:x"}
    queued = answers[0]
    assert isinstance(queued, Queued)
    left = await store.get_turn(queued.turn.id)
    assert (left.status, left.runner, left.lease_expires_at) == (TurnStatus.QUEUED, None, None)
