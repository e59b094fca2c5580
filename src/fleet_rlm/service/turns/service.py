"""Turns as the service runs them: queued (and run here when this process has room), claimed by workers,
cancelled from any process, followed live or from the store, waited for.

:class:`TurnService` owns this process's running turns, their live channels, the event journal, the
submission queue and, when this process runs turns, the worker that claims queued ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleet_rlm.config import Ceilings, Settings
from fleet_rlm.protocol.events import Event
from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.service.files import SessionFiles, clean_path
from fleet_rlm.service.kernels.service import KernelService
from fleet_rlm.service.memory import MemoryBook
from fleet_rlm.service.scaleout.wakeups import Wakeups, Watch
from fleet_rlm.service.scaleout.worker import TurnWorker
from fleet_rlm.service.turns.channel import FOLLOW_BATCH, ChannelRegistry
from fleet_rlm.service.turns.engines import OwnThreads, TurnEngine
from fleet_rlm.service.turns.execution import TurnExecution, TurnPlan
from fleet_rlm.service.turns.journal import EventJournal
from fleet_rlm.service.turns.processes import TurnProcesses
from fleet_rlm.service.turns.stored_reads import StoredReads
from fleet_rlm.service.turns.submissions import SubmissionQueue
from fleet_rlm.store import (
    Claimed,
    Conflict,
    Invalid,
    NewTurn,
    Queued,
    SessionRecord,
    Store,
    StoreError,
    TurnRecord,
)
from fleet_rlm.store.session_settings import check_session_settings, effective_settings

if TYPE_CHECKING:
    from fleet_rlm.service.tracing import TurnTracer

log = logging.getLogger(__name__)

STORED_POLL_SECONDS = 0.5
"""How often a reader of a turn another process runs looks at the store when no notification woke it."""
SHUTDOWN_GRACE_SECONDS = 10.0
"""How long stopping waits for each kind of work still in flight: cancelled turns, background cleanups."""
QUEUED_POLL_SECONDS = 5.0
"""The same for a turn still queued: its readers are woken when it starts or ends, by this process, by
a notification, or by the one read that looks at every queued turn being waited on
(:meth:`Wakeups.while_queued`), so this is only the last safety net. Under a burst dozens of streams
wait for room: each reading its turn every half second took a quarter of a busy server's event loop."""


@dataclass
class TurnSubmission:
    message: str
    context_paths: list[str] = field(default_factory=list)
    mode: str | None = None
    max_iterations: int | None = None
    max_model_calls: int | None = None
    turn_timeout: float | None = None
    history: list[tuple[str, str | None]] | None = None
    """The conversation so far as (message, answer) pairs, oldest first, in place of the session's own
    turns (an OpenAI-compatible call sends its conversation); None: the session's history. Not stored."""

    def options(self, ceilings: Ceilings) -> dict[str, Any]:
        values = {
            "mode": self.mode,
            "max_iterations": self.max_iterations,
            "max_model_calls": self.max_model_calls,
            "turn_timeout": self.turn_timeout,
        }
        return check_session_settings({k: v for k, v in values.items() if v is not None}, ceilings)


class TurnService:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        runner: str,
        files: SessionFiles,
        memory: MemoryBook,
        kernels: KernelService,
        *,
        tracer: TurnTracer | None,
        delete_session: Callable[[str], Awaitable[SessionRecord]],
    ) -> None:
        self._settings = settings
        self._store = store
        self._runner = runner
        self._files = files
        self._memory = memory
        self._kernels = kernels
        self.tracer = tracer
        self._delete_session = delete_session
        self.channels = ChannelRegistry()
        self.journal = EventJournal(store, self.ended_elsewhere)
        self.submissions = SubmissionQueue(store)
        self.executions: dict[str, TurnExecution] = {}
        self.wakeups = Wakeups(store.still_queued)
        self.stored_reads = StoredReads(store, limit=FOLLOW_BATCH)
        self.worker: TurnWorker | None = None
        self.engine: TurnEngine = OwnThreads()
        self._cleanups: set[asyncio.Task[None]] = set()
        self._abandons: set[asyncio.Task[None]] = set()
        """The cancels of turns whose callers went away, in the background (:meth:`abandon`)."""
        self.shutting_down = False
        """Set when the process starts to stop: callers cut off from then on do not abandon their turns."""

    async def start(self, *, serves_queue: bool) -> None:
        """Run turns here: in turn processes if the settings ask for them, claiming queued turns
        (``serves_queue``: any; otherwise only those this process queued itself)."""
        if self._settings.worker.turn_processes:
            self.engine = TurnProcesses(self._settings.worker.turn_processes)
            await self.engine.start()
        limit = self._settings.server.max_running_turns
        self.worker = TurnWorker(
            self._store,
            self._runner,
            limit or None,
            self._settings.worker.lease_seconds,
            self._run_claimed,
            affinity_seconds=self._kernels.affinity_seconds,
            serves_queue=serves_queue,
        )

    def claim_queued(self) -> None:
        """Start claiming queued turns (once the leases and notifications are in place)."""
        if self.worker is not None:
            self.worker.start()

    def running(self) -> list[str]:
        """The ids of the turns this process runs now."""
        return list(self.executions)

    async def stop(self, *, drain: float, drain_cut: asyncio.Event) -> None:
        """Stop claiming turns; give running ones ``drain`` seconds to finish (or until ``drain_cut``
        is set); stop the rest (they end ``interrupted``), then flush and close what turns kept open."""
        self.shutting_down = True
        if drain:
            log.info("draining: no new turns; %d running get %.0fs to finish", len(self.executions), drain)
        if self.worker is not None:
            await self.worker.drain()
        await self.submissions.close()  # a turn stored meanwhile is among the executions below
        if self._abandons:  # a cancel may start a turn, to end it cancelled: among the executions below
            await asyncio.wait(list(self._abandons), timeout=SHUTDOWN_GRACE_SECONDS)
        running = [e.task for e in self.executions.values() if e.task is not None]
        if drain and running:
            finished = asyncio.ensure_future(asyncio.wait(running))
            cut = asyncio.ensure_future(drain_cut.wait())
            await asyncio.wait([finished, cut], timeout=drain, return_when=asyncio.FIRST_COMPLETED)
            for waiting in (finished, cut):
                waiting.cancel()
            if drain_cut.is_set():
                log.info("the drain was cut short: %d running turns end interrupted", len(self.executions))
        executions = list(self.executions.values())
        for execution in executions:
            execution.cancel(shutdown=True)
        tasks = [e.task for e in executions if e.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_SECONDS)
        if self.tracer is not None:
            await asyncio.to_thread(self.tracer.shutdown)
            await asyncio.sleep(0)  # trace ids handed over while it shut down start being stored
        if self._cleanups:
            await asyncio.wait(list(self._cleanups), timeout=SHUTDOWN_GRACE_SECONDS)
        await self.journal.close()
        await self.wakeups.close()
        await self.stored_reads.close()
        await self.engine.close()

    async def submit(
        self, session_ref: str, submission: TurnSubmission, *, idempotency_key: str | None = None
    ) -> tuple[TurnRecord, bool]:
        """Queue a turn and start it in the background; returns it and whether it is new."""
        if not submission.message.strip():
            raise Invalid("the message is empty", code="invalid_request")
        context_paths = [clean_path(p) for p in submission.context_paths]
        ceilings = self._settings.server.ceilings
        options = submission.options(ceilings)
        # Run here at once when this process has room and no other live process keeps the session's
        # kernel (decided as the turn is stored: a read before it made every submission of a burst
        # wait for a connection); otherwise queued for that process, or whichever has room first.
        room = self.worker is not None and self.worker.reserve()

        def settle(answer: Queued | BaseException) -> None:
            """Start a turn claimed here, or give the room back; even if the caller went away."""
            if self.worker is None:
                return
            if isinstance(answer, Queued) and answer.created and answer.turn.runner == self._runner:
                self._start_execution(answer.turn, answer.session, held=True)
                return
            if room:
                self.worker.release()
            if isinstance(answer, Queued) and answer.created:
                # Queued for whoever has room: this process may have some by now (on SQLite no
                # notification wakes its worker).
                self.worker.queued_here(answer.turn.id)

        new = NewTurn(
            session_ref,
            submission.message,
            context_paths=context_paths,
            options=options,
            idempotency_key=idempotency_key,
            runner=self._runner if room else None,
            kernel_affinity=bool(self._kernels.affinity_seconds),
            lease_seconds=self._settings.worker.lease_seconds,
            history=submission.history,
            ceilings=ceilings,
        )
        queued = await self.submissions.create(new, settle)
        return queued.turn, queued.created

    def _run_claimed(self, claimed: Claimed) -> None:
        """Run a turn this process's worker claimed (its room already taken)."""
        self._start_execution(claimed.turn, claimed.session, held=True)

    def _start_execution(
        self, turn: TurnRecord, session: SessionRecord, *, held: bool, cancelled: bool = False
    ) -> None:
        """Run ``turn`` (claimed by this process) in the background; ``held``: it took room in the
        worker, given back when it ends; ``cancelled``: it ends cancelled at once (a cancel of a turn no
        worker had claimed)."""
        settings = effective_settings(self._settings, {"mode": session.mode}, session.settings, turn.options)
        history = [(message, answer) for message, answer in turn.history] if turn.history is not None else None
        plan = TurnPlan(turn=turn, session=session, settings=settings, history=history)
        channel = self.channels.open(turn.id)
        if self.tracer is not None and not cancelled:
            for observer in self.tracer.observers(session.id, self._keeping_trace_id(turn.id)):
                channel.subscribe(observer)
        execution = TurnExecution(
            plan,
            self._store,
            self._files,
            self._kernels.pool,
            channel,
            self.journal,
            self._memory,
            kernels=None if cancelled else self._kernels.registry,
            engine=self.engine,
        )
        if cancelled:
            execution.cancel()
        self.executions[turn.id] = execution
        worker = self.worker if held else None
        execution.start().add_done_callback(lambda _task: self._forget(turn.id, worker))
        self.wakeups.wake(turn.id)  # its readers follow it live from now on

    def _keeping_trace_id(self, turn_id: str) -> Callable[[str], None]:
        """Stores a turn's trace id on it as soon as its trace starts, moments after the turn's start."""

        loop = asyncio.get_running_loop()

        async def store(trace_id: str) -> None:
            try:
                await self._store.set_trace_id(turn_id, trace_id)
            except Exception:
                log.exception("turn %s: could not store its trace id", turn_id)

        def start_storing(trace_id: str) -> None:
            self._in_background(store(trace_id), name=f"trace-id-{turn_id}")

        def keep(trace_id: str) -> None:  # on a tracing thread
            loop.call_soon_threadsafe(start_storing, trace_id)

        return keep

    def _forget(self, turn_id: str, worker: TurnWorker | None) -> None:
        self.executions.pop(turn_id, None)
        self.channels.discard(turn_id)
        if worker is not None:
            worker.release()

    async def in_session(self, session_ref: str, *, after: int = 0, limit: int = 50) -> list[TurnRecord]:
        session = await self._store.get_session(session_ref)
        return await self._store.list_turns(session.id, after=after, limit=limit)

    async def get(self, turn_id: str) -> TurnRecord:
        """The turn as stored now; raises NotFound."""
        return await self._store.get_turn(turn_id)

    async def cancel(self, turn_id: str) -> TurnRecord:
        turn = await self._store.get_turn(turn_id)
        execution = self.executions.get(turn_id)
        # A turn's end is committed before its terminal event is sent, but its execution is
        # forgotten only a moment later: the stored status decides.
        if execution is not None and turn.active:
            execution.cancel()
            return await self._store.get_turn(turn_id)
        if turn.active and turn.runner is None:
            # No worker has claimed it: this process claims it, to end it cancelled.
            lease = self._settings.worker.lease_seconds
            for claimed in await self._store.claim_turns(self._runner, lease, limit=1, turn_ids=[turn_id]):
                self._start_execution(claimed.turn, claimed.session, held=False, cancelled=True)
                return await self._store.get_turn(turn_id)
        if turn.active:
            return await self._store.request_cancel(turn_id)  # its runner cancels it when told
        raise Conflict(f"turn {turn_id} already ended as {turn.status}", code="turn_not_active")

    async def events(self, turn_id: str, after_seq: int = 0) -> AsyncIterator[Event]:
        """A turn's events after ``after_seq``: replayed, then live until the terminal event.
        Raises NotFound up front. Keeping a quiet connection alive is the transport's job."""
        return _one_by_one(await self.event_batches(turn_id, after_seq))

    async def event_batches(
        self, turn_id: str, after_seq: int = 0, *, submitted: bool = False
    ) -> AsyncGenerator[list[Event], None]:
        """:meth:`events` in the batches they come in (published or read together): a stream sends
        each batch in one write. ``submitted``: the caller has just queued the turn (no need to check
        that it exists)."""
        if not submitted and self.channels.get(turn_id) is None:
            await self._store.get_turn(turn_id)
        return self._event_batches(turn_id, after_seq)

    async def _event_batches(self, turn_id: str, after_seq: int) -> AsyncGenerator[list[Event], None]:
        last = after_seq
        while True:
            channel = self.channels.get(turn_id)
            if channel is not None:
                async for batch in channel.follow(last):
                    yield batch
                return
            with self.wakeups.watch(turn_id) as watch:
                turn, stored = await self.stored_reads.read(turn_id, last)
                ended = next((index for index, event in enumerate(stored) if event.terminal), None)
                if ended is not None:
                    yield stored[: ended + 1]
                    return
                if stored:
                    yield stored
                    last = stored[-1].seq
                    continue
                # Nothing stored after ``last``: finished (no terminal stored, e.g. legacy; the turn was
                # read first, so nothing it stored was missed), queued, or run by another process,
                # whose progress we can only poll.
                if not turn.active and self.channels.get(turn_id) is None:
                    return
                await self._wait_for_news(turn, watch)

    async def _wait_for_news(self, turn: TurnRecord, watch: Watch) -> None:
        """Until ``turn`` (as just read) was woken, or its poll interval passed."""
        if turn.status != TurnStatus.QUEUED:
            await watch.wait(STORED_POLL_SECONDS)
            return
        with self.wakeups.while_queued(turn.id):
            await watch.wait(QUEUED_POLL_SECONDS)

    async def stored_events(self, turn_id: str, *, limit: int) -> list[Event]:
        """The turn's events stored so far, the first ``limit``, without following it; raises NotFound."""
        await self._store.get_turn(turn_id)
        return await self._store.events_after(turn_id, 0, limit=limit)

    def abandon(self, turn_id: str) -> None:
        """Cancel the turn: its caller went away. Never waits, so a request being torn down can call it:
        a turn this process runs is cancelled at once; one still queued, or run by another process, is
        cancelled in the background, as :meth:`cancel` does it. A caller cut off because this
        process is shutting down did not give its turn up: it is left to finish, or to end interrupted
        (``turn.interrupted``: the server shut down) when this process stops, like any other turn."""
        if self.shutting_down:
            return
        execution = self.executions.get(turn_id)
        if execution is not None:
            execution.cancel()
            return

        async def cancel() -> None:
            try:
                await self.cancel(turn_id)
            except Conflict:
                pass  # it ended meanwhile
            except Exception:
                log.exception("turn %s: its caller went away, and it could not be cancelled", turn_id)

        self._in_background(cancel(), name=f"abandon-{turn_id}", tasks=self._abandons)

    def delete_when_done(self, session_id: str, turn_id: str) -> None:
        """Delete an ephemeral session once its turn has ended (in the background)."""

        async def delete() -> None:
            await self.wait(turn_id)
            try:
                await self._delete_session(session_id)
            except StoreError as exc:
                log.warning("could not delete the ephemeral session %s: %s", session_id, exc)

        self._in_background(delete(), name=f"delete-{session_id}")

    def _in_background(
        self, work: Coroutine[Any, Any, None], *, name: str, tasks: set[asyncio.Task[None]] | None = None
    ) -> None:
        """Run ``work`` without waiting for it, kept in ``tasks`` (by default the cleanups): stopping the
        service gives them a moment to finish."""
        kept = self._cleanups if tasks is None else tasks
        task = asyncio.get_running_loop().create_task(work, name=name)
        kept.add(task)
        task.add_done_callback(kept.discard)

    async def wait(self, turn_id: str) -> TurnRecord:
        """Block until the turn ends (tests and the CLI use this)."""
        while True:
            execution = self.executions.get(turn_id)
            if execution is not None and execution.task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(execution.task)
            with self.wakeups.watch(turn_id) as watch:
                turn = await self._store.get_turn(turn_id)
                if not turn.active:
                    return turn
                if turn_id not in self.executions:  # queued for a worker, or run by another process
                    await self._wait_for_news(turn, watch)

    def cancel_here(self, turn_id: str) -> None:
        """Cancel the turn if this process runs it (a cancel asked of another process)."""
        execution = self.executions.get(turn_id)
        if execution is not None:
            execution.cancel()

    def ended_elsewhere(self, turn_id: str) -> None:
        """Stop the turn if this process still runs it: it was ended elsewhere (another process ends a turn
        whose lease lapsed: this process could not renew it for longer than a lease)."""
        execution = self.executions.get(turn_id)
        if execution is not None and execution.end_elsewhere():
            log.warning("turn %s was ended by another process (its lease here lapsed): stopping it", turn_id)


async def _one_by_one(batches: AsyncGenerator[list[Event], None]) -> AsyncIterator[Event]:
    async with contextlib.aclosing(batches):
        async for batch in batches:
            for event in batch:
                yield event
