"""Submissions that arrive together are stored together, each caller answered as if it had been alone."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import event

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns import TurnSubmission
from fleet_rlm.store import NotFound

pytestmark = pytest.mark.anyio


async def test_a_burst_of_submissions_is_queued_in_a_few_transactions(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", *[rlm_step("Done.", "SUBMIT(answer='ok')")] * 12)
    names = [f"burst-{index}" for index in range(12)]
    for name in names:
        await service.create_session(name=name)
    commits: list[int] = []
    event.listen(service.store.db.write_engine.sync_engine, "commit", lambda _connection: commits.append(1))
    submitted = [service.submit_turn(name, TurnSubmission(message=f"task of {name}")) for name in names]
    lost = service.submit_turn("no-such-session", TurnSubmission(message="lost"))

    answers = await asyncio.gather(*submitted, lost, return_exceptions=True)

    turns, missing = answers[:-1], answers[-1]
    assert all(isinstance(answer, tuple) and answer[1] is True for answer in turns)
    assert isinstance(missing, NotFound)  # its own answer; the others are queued
    creating_commits = len(commits)
    assert creating_commits < len(names) / 2  # together, not one transaction per submission
    for answer in turns:
        assert isinstance(answer, tuple)
        done = await service.wait_for_turn(answer[0].id)
        assert done.message.startswith("task of burst-") and done.status == "completed", done.error
