"""Turns as the service runs them: queued (and run here when this process has room), claimed by workers,
cancelled from any process, followed live or from the store, waited for.

:class:`TurnOperations` is a part of :class:`~fleet_rlm.service.service.FleetService`; it uses the
service's store, worker, channels and executions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleet_rlm.config import Ceilings, Settings
from fleet_rlm.protocol.events import Event
from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.service.files import SessionFiles, clean_path
from fleet_rlm.service.kernels.pool import SandboxPool
from fleet_rlm.service.kernels.registry import KernelRegistry
from fleet_rlm.service.memory import MemoryBook
from fleet_rlm.service.scaleout.wakeups import Wakeups, Watch
from fleet_rlm.service.scaleout.worker import TurnWorker
from fleet_rlm.service.turns.channel import ChannelRegistry
from fleet_rlm.service.turns.engines import TurnEngine
from fleet_rlm.service.turns.execution import TurnExecution, TurnPlan
from fleet_rlm.service.turns.journal import EventJournal
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


class TurnOperations(ABC):
    """The turn half of the service; the service provides the sandbox pool, the kernels and session deletion."""

    settings: Settings
    store: Store
    runner: str
    files: SessionFiles
    memory: MemoryBook
    journal: EventJournal
    submissions: SubmissionQueue
    channels: ChannelRegistry
    executions: dict[str, TurnExecution]
    wakeups: Wakeups
    stored_reads: StoredReads
    worker: TurnWorker | None
    tracer: TurnTracer | None
    engine: TurnEngine
    _cleanups: set[asyncio.Task[None]]
    _abandons: set[asyncio.Task[None]]
    shutting_down: bool

    @property
    @abstractmethod
    def pool(self) -> SandboxPool: ...

    @property
    @abstractmethod
    def kernels(self) -> KernelRegistry: ...

    @property
    @abstractmethod
    def kernel_affinity_seconds(self) -> float: ...

    @abstractmethod
    async def delete_session(self, ref: str) -> SessionRecord: ...

    async def submit_turn(
        self, session_ref: str, submission: TurnSubmission, *, idempotency_key: str | None = None
    ) -> tuple[TurnRecord, bool]:
        """Queue a turn and start it in the background; returns it and whether it is new."""
        if not submission.message.strip():
            raise Invalid("the message is empty", code="invalid_request")
        context_paths = [clean_path(p) for p in submission.context_paths]
        ceilings = self.settings.server.ceilings
        options = submission.options(ceilings)
        # Run here at once when this process has room and no other live process keeps the session's
        # kernel (decided as the turn is stored: a read before it made every submission of a burst
        # wait for a connection); otherwise queued for that process, or whichever has room first.
        room = self.worker is not None and self.worker.reserve()

        def settle(answer: Queued | BaseException) -> None:
            """Start a turn claimed here, or give the room back; even if the caller went away."""
            if self.worker is None:
                return
            if isinstance(answer, Queued) and answer.created and answer.turn.runner == self.runner:
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
            runner=self.runner if room else None,
            kernel_affinity=bool(self.kernel_affinity_seconds),
            lease_seconds=self.settings.worker.lease_seconds,
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
        settings = effective_settings(self.settings, {"mode": session.mode}, session.settings, turn.options)
        history = [(message, answer) for message, answer in turn.history] if turn.history is not None else None
        plan = TurnPlan(turn=turn, session=session, settings=settings, history=history)
        channel = self.channels.open(turn.id)
        if self.tracer is not None and not cancelled:
            for observer in self.tracer.observers(session.id, self._keeping_trace_id(turn.id)):
                channel.subscribe(observer)
        execution = TurnExecution(
            plan,
            self.store,
            self.files,
            self.pool,
            channel,
            self.journal,
            self.memory,
            kernels=None if cancelled else self.kernels,
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
                await self.store.set_trace_id(turn_id, trace_id)
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

    async def list_turns(self, session_ref: str, *, after: int = 0, limit: int = 50) -> list[TurnRecord]:
        session = await self.store.get_session(session_ref)
        return await self.store.list_turns(session.id, after=after, limit=limit)

    async def get_turn(self, turn_id: str) -> TurnRecord:
        """The turn as stored now; raises NotFound."""
        return await self.store.get_turn(turn_id)

    async def cancel_turn(self, turn_id: str) -> TurnRecord:
        turn = await self.store.get_turn(turn_id)
        execution = self.executions.get(turn_id)
        # A turn's end is committed before its terminal event is sent, but its execution is
        # forgotten only a moment later: the stored status decides.
        if execution is not None and turn.active:
            execution.cancel()
            return await self.store.get_turn(turn_id)
        if turn.active and turn.runner is None:
            # No worker has claimed it: this process claims it, to end it cancelled.
            lease = self.settings.worker.lease_seconds
            for claimed in await self.store.claim_turns(self.runner, lease, limit=1, turn_ids=[turn_id]):
                self._start_execution(claimed.turn, claimed.session, held=False, cancelled=True)
                return await self.store.get_turn(turn_id)
        if turn.active:
            return await self.store.request_cancel(turn_id)  # its runner cancels it when told
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
            await self.store.get_turn(turn_id)
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
        await self.store.get_turn(turn_id)
        return await self.store.events_after(turn_id, 0, limit=limit)

    def abandon_turn(self, turn_id: str) -> None:
        """Cancel the turn: its caller went away. Never waits, so a request being torn down can call it:
        a turn this process runs is cancelled at once; one still queued, or run by another process, is
        cancelled in the background, as :meth:`cancel_turn` does it. A caller cut off because this
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
                await self.cancel_turn(turn_id)
            except Conflict:
                pass  # it ended meanwhile
            except Exception:
                log.exception("turn %s: its caller went away, and it could not be cancelled", turn_id)

        self._in_background(cancel(), name=f"abandon-{turn_id}", tasks=self._abandons)

    def delete_when_done(self, session_id: str, turn_id: str) -> None:
        """Delete an ephemeral session once its turn has ended (in the background)."""

        async def delete() -> None:
            await self.wait_for_turn(turn_id)
            try:
                await self.delete_session(session_id)
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

    async def wait_for_turn(self, turn_id: str) -> TurnRecord:
        """Block until the turn ends (tests and the CLI use this)."""
        while True:
            execution = self.executions.get(turn_id)
            if execution is not None and execution.task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(execution.task)
            with self.wakeups.watch(turn_id) as watch:
                turn = await self.store.get_turn(turn_id)
                if not turn.active:
                    return turn
                if turn_id not in self.executions:  # queued for a worker, or run by another process
                    await self._wait_for_news(turn, watch)

    def _cancel_here(self, turn_id: str) -> None:
        """Cancel the turn if this process runs it (a cancel asked of another process)."""
        execution = self.executions.get(turn_id)
        if execution is not None:
            execution.cancel()

    def _ended_elsewhere(self, turn_id: str) -> None:
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
