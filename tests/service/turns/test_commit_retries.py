"""A turn's final commit (status, answer, last events, file changes in one transaction): a transient
database failure is retried; one that persists leaves followers knowing the end and the stored turn
active until its lease lapses (the process no longer holds it), when it is closed as interrupted."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import EventType
from fleet_rlm.service.scaleout.leases import LAPSED_REASON
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.store import Database, Store, TurnCommit
from fleet_rlm.testing.faults import FailingCalls
from fleet_rlm.testing.settings import SettingsFactory

pytestmark = pytest.mark.anyio

ANSWER = rlm_step("Answer.", "SUBMIT(answer='forty-two')")


def failing_ends(store: Store, failing: FailingCalls) -> Callable[..., Awaitable[TurnCommit]]:
    """``store.commit_turns`` whose commits that end a turn fail as ``failing`` says (the group commit
    and the turn's own retries alike)."""
    commit = store.commit_turns
    failing_commit = failing.wrap(commit)

    async def commit_turns(**parts: Any) -> TurnCommit:
        return await (failing_commit if parts.get("ends") else commit)(**parts)

    return commit_turns


async def test_a_transient_commit_failure_is_retried(
    service: FleetService, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = FailingCalls(failures=1)
    monkeypatch.setattr(service.parts.store, "commit_turns", failing_ends(service.parts.store, failing))
    await service.sessions.create(name="retry")
    model_server.script("root", ANSWER)
    turn, _ = await service.turns.submit("retry", TurnSubmission(message="the answer"))

    events = [e async for e in await service.turns.events(turn.id) if e is not None]
    done = await service.turns.wait(turn.id)

    assert failing.calls == 2  # the group commit, then the turn's own
    assert events[-1].type is EventType.TURN_COMPLETED
    assert (done.status, done.answer) == ("completed", "forty-two")
    stored = await service.parts.store.events_after(turn.id)
    assert stored[-1].type is EventType.TURN_COMPLETED
    assert [e.seq for e in stored] == [e.seq for e in events]


async def test_a_persistent_commit_failure_surfaces_and_the_lapsed_lease_closes_the_turn(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(worker_lease_seconds=1)
    first = FleetService(settings, database=Database(str(settings.database_url)))
    await first.start()
    try:
        failing = FailingCalls(failures=None)
        monkeypatch.setattr(first.parts.store, "commit_turns", failing_ends(first.parts.store, failing))
        await first.sessions.create(name="stuck")
        model_server.script("root", ANSWER)
        turn, _ = await first.turns.submit("stuck", TurnSubmission(message="the answer"))

        events = [e async for e in await first.turns.events(turn.id) if e is not None]
        closed = await first.turns.wait(turn.id)
        stored = [e async for e in await first.turns.events(turn.id) if e is not None]
    finally:
        await first.stop()

    assert failing.calls > 1  # retried before giving up
    assert events[-1].type is EventType.TURN_COMPLETED  # followers still learn the end
    assert (closed.status, closed.error) == ("interrupted", LAPSED_REASON)
    assert stored[-1].type is EventType.TURN_INTERRUPTED
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))

    second = FleetService(settings, database=Database(str(settings.database_url)))
    reconciled = await second.start(run_turns=False)
    try:
        assert reconciled.interrupted == []
    finally:
        await second.stop()
