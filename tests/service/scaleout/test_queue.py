"""Turns queued by an API-only process and run by a worker process, both over one PostgreSQL database
(here two services in one test process, each with its own runner id, connections and listener): the
queue, live streaming across processes, cancels across processes, draining, and notifications that
carry nothing but a wake-up."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path
from typing import TypeVar

import asyncpg
import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.service.scaleout.leases import LAPSED_REASON
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.journal import RETRY_DELAYS
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.store import Database, Interrupting
from fleet_rlm.store.runners import this_host
from fleet_rlm.testing.faults import FailingCalls
from fleet_rlm.testing.settings import scripted_settings
from tests.service.test_lifecycle import SLOW, give_up, wait_for_output
from tests.store.databases import PostgresDatabases

from .test_worker import until

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

QUICK = rlm_step("Answer.", "print('computing')\nSUBMIT(answer='42')")


def another_runner() -> str:
    """Each service here stands for a process of its own. A runner id naming this test's own pid would
    tell every other service that its process restarted (its turns and sandboxes dead), so it names a
    live process that is not this one, as another process on this host would."""
    return f"{this_host()}:{os.getppid()}:{uuid.uuid4().hex[:8]}"


class Processes:
    def __init__(self, model_server: ScriptedModelServer, home: Path, url: str) -> None:
        self.settings = scripted_settings(
            model_server, home, database_url=url, sandbox_pool_size=0, worker_in_server=False, worker_lease_seconds=3
        )
        self.started: list[FleetService] = []

    async def api(self) -> FleetService:
        return await self._start(
            FleetService(self.settings, database=Database(str(self.settings.database_url)), runner=another_runner())
        )

    async def worker(self, home: Path | None = None) -> FleetService:
        """A worker; with ``home``, on a data directory of its own (as on another machine)."""
        settings = self.settings if home is None else self.settings.with_values({"home": home})
        service = FleetService(
            settings, database=Database(str(settings.database_url)), runs_turns=True, runner=another_runner()
        )
        return await self._start(service)

    async def _start(self, service: FleetService) -> FleetService:
        await service.start()
        self.started.append(service)
        return service

    async def stop(self) -> None:
        for service in reversed(self.started):
            await service.stop()


P = TypeVar("P", bound=Processes)


@contextlib.asynccontextmanager
async def on_a_new_database(postgres_databases: PostgresDatabases, make: Callable[[str], P]) -> AsyncIterator[P]:
    """``make(url)`` on a fresh PostgreSQL database, its services stopped and the database dropped after."""
    url = await asyncio.to_thread(postgres_databases.new_url)
    running = make(url)
    try:
        yield running
    finally:
        await running.stop()
        await asyncio.to_thread(postgres_databases.drop, url)


@pytest.fixture
async def processes(
    model_server: ScriptedModelServer, home: Path, postgres_databases: PostgresDatabases
) -> AsyncIterator[Processes]:
    async with on_a_new_database(postgres_databases, lambda url: Processes(model_server, home, url)) as running:
        yield running


async def test_an_api_process_queues_the_turn_and_a_worker_runs_it_while_the_api_streams_it_live(
    processes: Processes, model_server: ScriptedModelServer
) -> None:
    api = await processes.api()
    assert api.turns.worker is None  # it runs no turns
    worker = await processes.worker()
    await api.sessions.create(name="s")
    model_server.script("root", QUICK)
    turn, _ = await api.turns.submit("s", TurnSubmission(message="the answer"))
    assert turn.runner is None and turn.status == "queued"

    events = [event async for event in await api.turns.events(turn.id)]
    done = await api.turns.wait(turn.id)

    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].type is EventType.TURN_COMPLETED
    assert any(e.type is EventType.OUTPUT and "computing" in str(e.data["text"]) for e in events)
    assert (done.status, done.answer, done.runner) == ("completed", "42", worker.parts.runner)


@pytest.mark.parametrize("how", ["cancel", "abandon"])
async def test_a_cancel_asked_of_the_api_process_reaches_the_worker_within_a_second(
    processes: Processes, model_server: ScriptedModelServer, how: str
) -> None:
    """Asked, or by an MCP or OpenAI-compatible caller that went away (the process it called may not be
    the one running its turn)."""
    api, _worker = await processes.api(), await processes.worker()
    await api.sessions.create(name="s")
    model_server.script("root", rlm_step("Slow.", SLOW))
    turn, _ = await api.turns.submit("s", TurnSubmission(message="slow"))
    await wait_for_output(api, turn.id, "started")

    asked = time.monotonic()
    await give_up(api, turn.id, how)
    ended = await api.turns.wait(turn.id)
    assert ended.status == "cancelled"
    assert time.monotonic() - asked < 1.0


async def test_a_session_deleted_through_the_api_process_ends_the_kernel_a_worker_keeps(
    processes: Processes, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    api, worker = await processes.api(), await processes.worker(home=tmp_path / "worker")
    session = await api.sessions.create(name="s")
    model_server.script("root", rlm_step("Keep.", "x = 1\nSUBMIT(answer='kept')"))
    turn, _ = await api.turns.submit("s", TurnSubmission(message="keep x"))
    assert (await worker.turns.wait(turn.id)).runner == worker.parts.runner  # its kernel's snapshot taken too
    assert session.id in worker.kernels.registry.live
    assert worker.kernels.registry.state.directory(session.id).is_dir()

    await api.sessions.delete("s")
    asked = worker.kernels.registry._existing
    assert asked is not None

    async def while_a_new_sessions_kernel_opens(session_ids: Collection[str]) -> set[str]:
        kept = await asked(session_ids)
        model_server.script("root", rlm_step("New.", "y = 2\nSUBMIT(answer='new')"))
        fresh, _ = await api.turns.submit("new", TurnSubmission(message="a new session's turn"))
        await worker.turns.wait(fresh.id)
        return kept

    new = await api.sessions.create(name="new")
    worker.kernels.registry._existing = while_a_new_sessions_kernel_opens
    await worker.kernels.registry.forget_deleted()  # what its sweep does every quarter idle timeout, at most 30 s
    assert session.id not in worker.kernels.registry.live, "the deleted session's kernel lives on"
    assert not worker.kernels.registry.state.directory(session.id).exists(), "its kernel state is kept"
    assert new.id in worker.kernels.registry.live, "a kernel opened while the sweep asked was taken for a deleted one's"
    assert worker.kernels.registry.state.directory(new.id).is_dir()


TICKING = "import time\nfor i in range(300):\n    print('tick', i, flush=True)\n    time.sleep(0.1)\nSUBMIT(answer='x')"


async def test_a_worker_whose_turn_was_ended_elsewhere_stores_nothing_more_and_its_followers_see_the_stored_end(
    processes: Processes, model_server: ScriptedModelServer
) -> None:
    """A worker out of the database's reach for longer than its lease: another process's sweep ends its
    turn interrupted (as here, with the sweep's own call). The worker, still running the turn, must not
    store events after that end, must stop the turn, and its own followers must see the stored end."""
    api, worker = await processes.api(), await processes.worker()
    await api.sessions.create(name="s")
    model_server.script("root", rlm_step("Tick.", TICKING))
    turn, _ = await api.turns.submit("s", TurnSubmission(message="tick"))
    await wait_for_output(api, turn.id, "tick 3")

    async def follow(service: FleetService) -> list[tuple[int, EventType]]:
        return [(e.seq, e.type) async for e in await service.turns.events(turn.id)]

    on_worker, on_api = asyncio.create_task(follow(worker)), asyncio.create_task(follow(api))
    await api.parts.store.interrupt_turns(Interrupting(turn_ids={turn.id}), LAPSED_REASON)
    assert (await api.turns.get(turn.id)).status == "interrupted"
    seen_on_worker = await asyncio.wait_for(on_worker, 10)
    seen_on_api = await asyncio.wait_for(on_api, 10)
    await until(lambda: turn.id not in worker.turns.executions)

    stored = [(e.seq, e.type) for e in await api.turns.stored_events(turn.id, limit=1000)]
    assert stored[-1][1] is EventType.TURN_INTERRUPTED
    assert [kind for _, kind in stored].count(EventType.TURN_INTERRUPTED) == 1, "nothing stored after the end"
    assert seen_on_worker == stored, "the worker's followers saw events that were not stored, or another end"
    assert seen_on_api == stored
    assert (await api.turns.get(turn.id)).status == "interrupted"


async def test_a_worker_that_published_events_it_could_not_store_ends_its_own_streams_interrupted_too(
    processes: Processes, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker cannot store events for longer than its journal retries (its followers still get them),
    and meanwhile another process ends the turn. The stored end then comes before what the worker's
    followers saw: they get a ``turn.interrupted`` of the worker's own after it, never another end."""
    api, worker = await processes.api(), await processes.worker()
    await api.sessions.create(name="s")
    model_server.script("root", rlm_step("Tick.", TICKING))
    turn, _ = await api.turns.submit("s", TurnSubmission(message="tick"))
    await wait_for_output(api, turn.id, "tick 3")
    on_worker = asyncio.create_task(_events_of(worker, turn.id))
    failing = FailingCalls(failures=None)
    monkeypatch.setattr(worker.parts.store, "append_events", failing.wrap(worker.parts.store.append_events))
    await until(lambda: failing.failed > len(RETRY_DELAYS), 15)  # the journal gave a write up

    await api.parts.store.interrupt_turns(Interrupting(turn_ids={turn.id}), LAPSED_REASON)
    seen = await asyncio.wait_for(on_worker, 20)

    stored = await api.turns.stored_events(turn.id, limit=1000)
    assert stored[-1].type is EventType.TURN_INTERRUPTED
    assert [e.type for e in seen if e.terminal] == [EventType.TURN_INTERRUPTED]
    assert seen[-1].type is EventType.TURN_INTERRUPTED and seen[-1].data["reason"] == LAPSED_REASON
    assert seen[-1].seq > stored[-1].seq, "the worker's followers saw events after the stored end"


async def test_a_worker_that_could_reach_nothing_and_finished_a_turn_ended_elsewhere_tells_it_interrupted(
    processes: Processes, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither its events nor its lease renewals reach the database, so the worker learns that the API
    process ended its turn (the lease lapsed) only when its own end is refused, after publishing events
    it never stored: its followers get a ``turn.interrupted``, as stored, not the turn's own end."""
    api, worker = await processes.api(), await processes.worker()
    await api.sessions.create(name="s")
    ticking = (
        "import time\nfor i in range(80):\n    print('tick', i, flush=True)\n    time.sleep(0.1)\nSUBMIT(answer='x')"
    )
    model_server.script("root", rlm_step("Tick.", ticking))
    turn, _ = await api.turns.submit("s", TurnSubmission(message="tick"))
    await wait_for_output(api, turn.id, "tick 3")
    on_worker = asyncio.create_task(_events_of(worker, turn.id))
    for call in ("append_events", "renew_leases"):
        monkeypatch.setattr(
            worker.parts.store, call, FailingCalls(failures=None).wrap(getattr(worker.parts.store, call))
        )

    seen = await asyncio.wait_for(on_worker, 30)

    stored = await api.turns.stored_events(turn.id, limit=1000)
    assert stored[-1].type is EventType.TURN_INTERRUPTED, "the API process's sweep ended the turn"
    assert [e.type for e in seen if e.terminal] == [EventType.TURN_INTERRUPTED]
    assert seen[-1].data["reason"] == LAPSED_REASON and seen[-1].seq > stored[-1].seq


async def _events_of(service: FleetService, turn_id: str) -> list[Event]:
    return [event async for event in await service.turns.events(turn_id)]


async def test_a_notification_is_only_a_wake_up_a_forged_cancel_stops_nothing(
    processes: Processes, model_server: ScriptedModelServer
) -> None:
    """Anyone who can NOTIFY on the database's channels can only make Fleet look at its tables sooner."""
    api, _worker = await processes.api(), await processes.worker()
    await api.sessions.create(name="s")
    model_server.script("root", rlm_step("Slow.", SLOW))
    turn, _ = await api.turns.submit("s", TurnSubmission(message="slow"))
    await wait_for_output(api, turn.id, "started")

    dsn = str(processes.settings.database_url).replace("postgresql+asyncpg://", "postgresql://", 1)
    connection = await asyncpg.connect(dsn)
    try:
        for channel in ("fleet_turn_cancel", "fleet_turn_queued", "fleet_turn_events"):
            for payload in (turn.id, "", "x" * 7000, "'; DROP TABLE turns; --", "\u202e"):
                await connection.execute("SELECT pg_notify($1, $2)", channel, payload)
    finally:
        await connection.close()
    await asyncio.sleep(1.5)
    assert (await api.turns.get(turn.id)).status == "running"

    await api.turns.cancel(turn.id)
    assert (await api.turns.wait(turn.id)).status == "cancelled"


@pytest.mark.parametrize("how", ["cancel", "abandon"])
async def test_a_turn_no_worker_claimed_is_cancelled_at_once_by_the_api_process(processes: Processes, how: str) -> None:
    api = await processes.api()
    await api.sessions.create(name="s")
    turn, _ = await api.turns.submit("s", TurnSubmission(message="nobody runs this"))
    await give_up(api, turn.id, how)
    ended = await api.turns.wait(turn.id)
    assert ended.status == "cancelled"
    assert [e.type for e in await api.turns.stored_events(turn.id, limit=10)][-1] is EventType.TURN_CANCELLED


async def test_a_draining_worker_finishes_its_turn_and_claims_no_more_another_worker_does(
    processes: Processes, model_server: ScriptedModelServer
) -> None:
    api, first = await processes.api(), await processes.worker()
    for name in ("running", "waiting"):
        await api.sessions.create(name=name)
    model_server.script_for_task(
        "root",
        "slow-ish",
        rlm_step("Work.", "print('started', flush=True)\nimport time\ntime.sleep(2)\nSUBMIT(answer='done')"),
    )
    running, _ = await api.turns.submit("running", TurnSubmission(message="slow-ish"))
    await wait_for_output(api, running.id, "started")

    draining = asyncio.create_task(first.stop(drain=30))
    await asyncio.sleep(0.2)
    model_server.script_for_task("root", "after the drain", QUICK)
    waiting, _ = await api.turns.submit("waiting", TurnSubmission(message="after the drain"))
    await draining
    processes.started.remove(first)

    assert (await api.turns.get(running.id)).status == "completed"
    assert (await api.turns.get(waiting.id)).status == "queued"
    second = await processes.worker()
    done = await api.turns.wait(waiting.id)
    assert (done.status, done.runner) == ("completed", second.parts.runner)


async def test_a_worker_never_reuses_its_kernel_after_another_worker_ran_the_session(
    processes: Processes, model_server: ScriptedModelServer
) -> None:
    """x is 1 in worker A's live kernel, then 2 after a turn on worker B; A's next turn must see 2."""
    processes.settings = processes.settings.with_values({"max_running_turns": 1})
    api = await processes.api()
    for name in ("s", "hold-a", "hold-b"):
        await api.sessions.create(name=name)

    async def submit(session: str, task: str, code: str) -> str:
        model_server.script_for_task("root", task, rlm_step("Go.", code))
        turn, _ = await api.turns.submit(session, TurnSubmission(message=task))
        return turn.id

    async def claimed(turn_id: str) -> str:
        while (runner := (await api.turns.get(turn_id)).runner) is None:
            await asyncio.sleep(0.05)
        return runner

    hold = "import time\ntime.sleep(6)\nSUBMIT(answer='held')"
    a = await processes.worker()
    one = await submit("s", "set one", "x = 1\nSUBMIT(answer=str(x))")
    assert ((await api.turns.wait(one)).answer, await claimed(one)) == ("1", a.parts.runner)
    holding_a = await submit("hold-a", "hold A", hold)
    assert await claimed(holding_a) == a.parts.runner

    b = await processes.worker()
    two = await submit("s", "add one", "x = x + 1\nSUBMIT(answer=str(x))")
    assert ((await api.turns.wait(two)).answer, await claimed(two)) == ("2", b.parts.runner)
    holding_b = await submit("hold-b", "hold B", hold)
    assert await claimed(holding_b) == b.parts.runner
    assert (await api.turns.wait(holding_a)).status == "completed"

    three = await submit("s", "read", "SUBMIT(answer=str(x))")
    done = await api.turns.wait(three)
    assert done.runner == a.parts.runner
    assert done.answer == "2", "worker A answered from its stale kernel"


async def test_a_worker_that_loses_its_database_logs_each_traceback_once_and_says_when_it_works_again(
    processes: Processes, caplog: pytest.LogCaptureFixture
) -> None:
    worker = await processes.worker()
    dsn = str(processes.settings.database_url).replace("postgresql+asyncpg://", "postgresql://", 1)
    name = dsn.rsplit("/", 1)[1]
    admin = await asyncpg.connect(dsn.rsplit("/", 1)[0] + "/test")
    caplog.set_level(logging.INFO, logger="fleet_rlm")
    try:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name)
        await asyncio.sleep(4)  # the worker polls every second and sweeps leases every 0.6 s
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        await admin.close()
    await asyncio.sleep(2)

    tracebacks = Counter(r.getMessage() for r in caplog.records if r.exc_info is not None)
    assert "claiming queued turns failed; trying again" in tracebacks, caplog.text
    assert set(tracebacks.values()) == {1}, tracebacks
    assert "claiming queued turns works again" in caplog.text
    await worker.sessions.create(name="after")  # the database is back, and so is the worker
