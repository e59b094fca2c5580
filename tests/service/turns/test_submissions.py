"""Submissions that arrive together are stored together, each caller answered as if it had been alone."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import event

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.service.turns.submissions import SubmissionQueue, SubmissionsClosed
from fleet_rlm.store import NewTurn, NotFound

pytestmark = pytest.mark.anyio


def hold_batches(service: FleetService) -> asyncio.Event:
    """Batches of submissions wait to be stored until the returned event is set."""
    release = asyncio.Event()
    store_turns = service.parts.store.create_turns

    async def held(news):  # type: ignore[no-untyped-def]
        await release.wait()
        return await store_turns(news)

    service.parts.store.create_turns = held  # type: ignore[method-assign]
    return release


def reading_sessions(reads: list[str]) -> Callable[..., None]:
    """A ``before_cursor_execute`` listener noting each statement that reads the sessions table."""

    def note(_connection: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and re.search(r"\bFROM sessions\b", statement):
            reads.append(statement)

    return note


async def test_a_burst_of_submissions_is_queued_in_a_few_transactions(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", *[rlm_step("Done.", "SUBMIT(answer='ok')")] * 12)
    names = [f"burst-{index}" for index in range(12)]
    for name in names:
        await service.sessions.create(name=name)
    commits: list[int] = []
    session_reads: list[str] = []
    event.listen(service.parts.store.db.write_engine.sync_engine, "commit", lambda _connection: commits.append(1))
    for engine in {service.parts.store.db.read_engine, service.parts.store.db.write_engine}:
        event.listen(engine.sync_engine, "before_cursor_execute", reading_sessions(session_reads))
    submitted = [service.turns.submit(name, TurnSubmission(message=f"task of {name}")) for name in names]
    lost = service.turns.submit("no-such-session", TurnSubmission(message="lost"))

    answers = await asyncio.gather(*submitted, lost, return_exceptions=True)

    turns, missing = answers[:-1], answers[-1]
    assert all(isinstance(answer, tuple) and answer[1] is True for answer in turns)
    assert isinstance(missing, NotFound)  # its own answer; the others are queued
    creating_commits = len(commits)
    assert creating_commits < len(names) / 2  # together, not one transaction per submission
    assert 1 <= len(session_reads) <= creating_commits  # read by each batch: never once per submission
    for answer in turns:
        assert isinstance(answer, tuple)
        done = await service.turns.wait(answer[0].id)
        assert done.message.startswith("task of burst-") and done.status == "completed", done.error


async def test_a_turn_stored_for_a_caller_that_went_away_still_runs(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    """Cancelled once its submission was taken into a batch, the caller hears the cancel, but the turn
    it stored is started (its room is not given back with the turn left queued): the session is not
    stuck with a turn nobody runs."""
    model_server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"))
    session = await service.sessions.create(name="gone")
    release = hold_batches(service)
    caller = asyncio.create_task(service.turns.submit(session.id, TurnSubmission(message="left behind")))
    while not service.turns.submissions._task:  # taken into a batch, which waits for ``release``
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    caller.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller

    for _ in range(500):  # its batch finishes storing after the caller was told
        if turns := await service.turns.in_session(session.id):
            break
        await asyncio.sleep(0.01)
    assert [turn.message for turn in turns] == ["left behind"]
    done = await service.turns.wait(turns[0].id)
    assert done.status == "completed", done.error
    again, created = await service.turns.submit(session.id, TurnSubmission(message="next"))
    assert created
    await service.turns.wait(again.id)


async def test_a_caller_cancelled_before_its_batch_stores_nothing(service: FleetService) -> None:
    sessions = [await service.sessions.create(name=f"wait-{index}") for index in range(2)]
    release = hold_batches(service)
    first = asyncio.create_task(service.turns.submit(sessions[0].id, TurnSubmission(message="first")))
    while not service.turns.submissions._task:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # the first batch is being stored: the second waits for the next
    second = asyncio.create_task(service.turns.submit(sessions[1].id, TurnSubmission(message="second")))
    await asyncio.sleep(0.05)
    second.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await second
    turn, _ = await first
    assert await service.turns.in_session(sessions[1].id) == []
    await service.turns.wait(turn.id)


async def test_a_submission_after_the_queue_closed_is_refused_and_still_settled(service: FleetService) -> None:
    """Refused, it is settled all the same: a turn's room taken before submitting is given back."""
    session = await service.sessions.create(name="late")
    queue = SubmissionQueue(service.parts.store)
    await queue.close()
    settled: list[object] = []
    with pytest.raises(SubmissionsClosed):
        await queue.create(NewTurn(session.id, "too late"), settled.append)
    assert len(settled) == 1 and isinstance(settled[0], SubmissionsClosed)
    assert await service.turns.in_session(session.id) == []
