"""One turn run by the server, from ``queued`` to its committed end.

Steps: mark the turn running with the version of the program it is served (the newest approved
optimization, or the built-in program) and its ``turn.started`` (stored together, published at once:
the person sees the turn start before its sandbox is ready), take a sandbox from the pool, copy the
session's files and the approved memory (``memory/MEMORIES.md``) into its workspace, keep its replay
snapshot when ``capture_replays`` is on, run the engine's turn (its
events go live to followers and are stored in batches; its ``remember`` proposals are stored as it
makes them), then in one transaction commit the status, answer, usage, the last events with the
terminal one, and (only when the turn completed) the artifacts it wrote. Failed or cancelled turns leave
the session's files as they were. The sandbox is torn down whatever happens, except the session's
kernel (:mod:`fleet_rlm.service.kernels.registry`): the turn runs on it, and after the commit it is kept, its
variables listed and snapshotted, for the session's next turn.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_attempt,
    wait_chain,
    wait_fixed,
)

from fleet_rlm.config import Settings
from fleet_rlm.engine.program import ProgramSpec
from fleet_rlm.engine.turn import Announced, HistoryEntry, TurnOutcome, TurnRequest, turn_limits, turn_started
from fleet_rlm.protocol.events import Event, EventType, new_id
from fleet_rlm.protocol.payloads import TurnWarning
from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.service.files import ArtifactBudget, SessionFiles, given_to_turns, refresh_workspace
from fleet_rlm.service.kernels.pool import Lease, SandboxPool
from fleet_rlm.service.kernels.registry import Kernel, KernelOpening, KernelRegistry
from fleet_rlm.service.kernels.state import TurnRuns
from fleet_rlm.service.memory import MEMORY_FILE, MemoryBook
from fleet_rlm.service.scaleout.leases import LAPSED_REASON
from fleet_rlm.service.turns.channel import TurnChannel
from fleet_rlm.service.turns.engines import OwnThreads, RunningTurn, TurnEngine
from fleet_rlm.service.turns.journal import EventJournal, Started
from fleet_rlm.service.turns.programs import program_of_turn, program_or_builtin
from fleet_rlm.service.turns.replays import capture
from fleet_rlm.service.turns.storable import make_storable
from fleet_rlm.store import (
    Conflict,
    FileChanges,
    FileRecord,
    NotFound,
    SessionRecord,
    Store,
    TurnEnd,
    TurnRecord,
    TurnStart,
)

log = logging.getLogger(__name__)

SHUTDOWN_REASON = "the server shut down while the turn was running"
TERMINAL_WAIT = 5.0
COMMIT_WAITS = (0.1, 0.5, 2.0)


@dataclass
class TurnPlan:
    """Everything a turn needs that was decided when it was submitted."""

    turn: TurnRecord
    session: SessionRecord
    settings: Settings
    history: list[tuple[str, str | None]] | None = None
    """The conversation the submitter sent, in place of the session's stored turns; None: those."""


class TurnExecution:
    def __init__(
        self,
        plan: TurnPlan,
        store: Store,
        files: SessionFiles,
        pool: SandboxPool,
        channel: TurnChannel,
        journal: EventJournal,
        memory: MemoryBook,
        kernels: KernelRegistry | None = None,
        engine: TurnEngine | None = None,
    ) -> None:
        self.plan = plan
        self.engine = engine or OwnThreads()
        self.kernels = kernels if kernels is not None and kernels.enabled else None
        self.kernel: Kernel | None = None
        self.memory = memory
        self.turn_id = plan.turn.id
        self.store = store
        self.files = files
        self.pool = pool
        self.channel = channel
        self.journal = journal
        self.loop = asyncio.get_running_loop()
        self.engine_turn: RunningTurn | None = None
        self.cancel_requested = False
        self.shutting_down = False
        self.ending = False
        """Its end is being committed (a cancel no longer changes it)."""
        self.ended_elsewhere = False
        self.lease: Lease | None = None
        self._terminal: Event | None = None
        self._terminal_seen = asyncio.Event()
        self._late: list[Event] = []
        """Events of the turn found after the engine ended, stored and published before its end."""
        self._last_seq = 0
        self._root_span = new_id("span")
        self.task: asyncio.Task[None] | None = None

    # Control ----------------------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        self.task = asyncio.create_task(self._run(), name=f"turn-{self.turn_id}")
        return self.task

    def cancel(self, *, shutdown: bool = False) -> None:
        """Stop the turn: it ends ``cancelled``, or ``interrupted`` when the process stops it (a cancel
        asked before that stays a cancel)."""
        if not self.cancel_requested:
            self.shutting_down = shutdown
        self.cancel_requested = True
        if self.engine_turn is not None:
            self.engine_turn.cancel()

    def end_elsewhere(self) -> bool:
        """Stop the turn because another process ended it; its followers then get the end that was
        stored. False when it was already stopped so, or is committing its own end."""
        if self.ending or self.ended_elsewhere:
            return False
        self.ended_elsewhere = True
        self.cancel()
        return True

    # Events -----------------------------------------------------------------------------------

    def sink(self, event: Event) -> None:
        """The engine's sink; called on engine threads and the loop alike."""
        self.loop.call_soon_threadsafe(self._accept, event)

    def _accept(self, event: Event) -> None:
        self._last_seq = max(self._last_seq, event.seq)
        if event.type is EventType.TURN_STARTED:
            self._root_span = event.span_id
        if event.terminal:
            self._terminal = event  # published after the commit
            self._terminal_seen.set()
            return
        self.journal.put(event, self.channel.publish)  # followers see it once stored

    # The run ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            outcome, changes = await self._execute()
            await self._commit(outcome, changes)
        except Exception as exc:  # a bug or a dead database: the turn must still end
            log.exception("turn %s: server error", self.turn_id)
            await self._commit(
                TurnOutcome(status=TurnStatus.FAILED, error=f"server error: {type(exc).__name__}: {exc}"), None
            )
        finally:
            if self.lease is not None and self.kernel is not None and self.kernels is not None:
                await self.kernels.finish(self.kernel, self.lease)
            elif self.lease is not None:
                await self.pool.release(self.lease)

    async def _execute(self) -> tuple[TurnOutcome, FileChanges | None]:
        plan = self.plan
        if self.cancel_requested:
            return self._stopped_outcome(), None
        program = await self._mark_running()
        if program is None:
            return self._stopped_outcome(), None
        if self.cancel_requested:  # asked while its start was stored: no sandbox is taken
            return self._stopped_outcome(), None
        opening: KernelOpening | None = None
        finished: list[TurnRecord] = []
        if plan.turn.position > 1:  # a session's first turn (many sessions have one) has none to read
            finished = await self.store.history(plan.session.id, before_position=plan.turn.position)
        if self.kernels is not None:
            reset_after = await self.store.kernel_reset_after(plan.session.id) if plan.turn.position > 1 else 0
            ran = tuple((t.position, t.runner) for t in finished if t.runner)
            runs = TurnRuns(plan.turn.position, ran, reset_after)
            self.lease, opening = await self.kernels.open(plan.session.id, self.turn_id, runs)
            self.kernel = opening.kernel
        else:
            self.lease = await self.pool.acquire(plan.session.id, self.turn_id)
        records = await self.store.list_files(plan.session.id)
        await self.files.fetch_records(plan.session.id, [r for r in records if given_to_turns(r)])
        workspace = self.lease.workspace
        if self.kernel is not None:
            self.kernel.placed = await asyncio.to_thread(
                refresh_workspace, self.files, plan.session.id, records, self.lease.files, workspace, self.kernel.placed
            )
            placed = {path: identity[0] for path, identity in self.kernel.placed.items()}
        else:
            placed = await asyncio.to_thread(self.files.materialize, plan.session.id, records, self.lease.files)
        memory = await self.memory.context()
        if memory is not None:
            await asyncio.to_thread(self.lease.files.push, io.BytesIO(memory.encode()), MEMORY_FILE)
        if plan.history is not None:
            history = [HistoryEntry(message=message, answer=answer) for message, answer in plan.history]
        else:
            history = [HistoryEntry(message=t.message, answer=t.answer) for t in finished]
        if self.cancel_requested:
            return self._stopped_outcome(), None
        request = TurnRequest(
            task=plan.turn.message,
            workspace=workspace.root,
            turn_id=self.turn_id,
            history=history,
            context_paths=list(plan.turn.context_paths),
            mode=self._mode,
            **self._asked_limits,
            memory=memory,
            propose_memory=self.memory.proposals_for(plan.session.id, self.turn_id, self.loop),
            program=program,
            kernel=opening.text if opening is not None else "",
            kernel_events=opening.events if opening is not None else [],
            announced=Announced(self._last_seq, self._root_span),
        )
        if plan.settings.quality.capture_replays:
            await self._capture(request, [r for r in records if r.path in placed])
        self.engine_turn = await self.engine.begin(plan.settings, request, self.sink, self.lease.backend)
        if self.cancel_requested:
            self.engine_turn.cancel()
        outcome = await self.engine_turn.run()
        if not self.engine_turn.lost:
            try:
                await asyncio.wait_for(self._terminal_seen.wait(), TERMINAL_WAIT)
            except TimeoutError:
                log.error("turn %s: the engine returned without a terminal event", self.turn_id)
        if outcome.status is not TurnStatus.COMPLETED:
            return outcome, None
        budget = ArtifactBudget.of(plan.settings.sandbox, records)
        changes, refused = await asyncio.to_thread(
            self.files.collect_changes, plan.session.id, workspace, self.lease.files, placed, budget
        )
        if refused:
            self._warn_before_end(list(refused.values()))
            outcome.artifacts = [a for a in outcome.artifacts if a.get("path") not in refused]
        await self.files.share(plan.session.id, (record.sha256 for record in changes.upserts))
        return outcome, changes

    def _warn_before_end(self, messages: list[str]) -> None:
        """Warnings found once the engine ended (artifacts not copied out) take the place of its
        terminal event, which is made again after them, stored and published with them."""
        first = self._terminal.seq if self._terminal is not None else self._last_seq + 1
        for offset, message in enumerate(messages):
            payload = TurnWarning(message=message)
            self._late.append(
                Event.carrying(
                    payload,
                    seq=first + offset,
                    turn_id=self.turn_id,
                    ts=time.time(),
                    span_id=self._root_span,
                    parent_span_id=None,
                )
            )
        self._last_seq = first + len(messages) - 1
        self._terminal = None

    @property
    def _mode(self) -> str:
        return self.plan.turn.options.get("mode") or self.plan.settings.mode

    @property
    def _asked_limits(self) -> dict[str, Any]:
        """The limits the submission asked for (None: the settings')."""
        options = self.plan.turn.options
        return {name: options.get(name) for name in ("max_iterations", "max_model_calls", "turn_timeout")}

    async def _mark_running(self) -> ProgramSpec | None:
        """queued -> running with the turn's ``turn.started``, in the journal's next group commit (alone,
        if that commit fails); the event is published once stored, before the turn's sandbox is ready.
        Returns the program the turn runs (the one serving as it was marked), None if it no longer could."""
        plan = self.plan
        payload = turn_started(
            self.pool.backend,
            task=plan.turn.message,
            context_paths=list(plan.turn.context_paths),
            mode=self._mode,
            limits=turn_limits(plan.settings, **self._asked_limits),
        )
        started = Event.carrying(
            payload,
            seq=self._last_seq + 1,  # its first
            turn_id=self.turn_id,
            ts=time.time(),
            span_id=self._root_span,
            parent_span_id=None,
        )
        marked: Started | None = None
        try:
            marked = await self.journal.start(TurnStart(self.turn_id, events=[started]))
            running = marked is not None
        except Exception:
            log.warning("turn %s: its start was not stored with the others; storing it alone", self.turn_id)
            running = await self.store.mark_running(self.turn_id, events=[started])
            # The group commit may have failed only on its way back, with the start stored.
            running = running or await self._stored(started)
        if not running:
            return None
        # Stored: whatever fails from here on ends the turn after its turn.started.
        self._last_seq = started.seq
        self.channel.publish(started)
        if marked is not None:
            return program_or_builtin(marked.program)
        return await program_of_turn(self.store, self.turn_id)

    async def _stored(self, event: Event) -> bool:
        """Whether ``event`` (this turn's first) is the one stored for the turn."""
        first = await self.store.events_after(self.turn_id, 0, limit=1)
        return bool(first) and first[0].seq == event.seq and first[0].span_id == event.span_id

    async def _capture(self, request: TurnRequest, files: list[FileRecord]) -> None:
        """Keep the snapshot of the turn's inputs; a turn whose snapshot could not be stored still runs
        (it just cannot be labeled)."""
        plan = self.plan
        overrides = {"mode": plan.session.mode, **plan.session.settings, **plan.turn.options}
        snapshot = capture(request, plan.session.id, plan.settings, files, overrides)
        try:
            await self.store.save_replay(self.turn_id, plan.session.id, snapshot.model_dump(mode="json"))
        except Exception:
            log.exception("turn %s: could not store its replay snapshot", self.turn_id)

    def _stopped_outcome(self) -> TurnOutcome:
        return TurnOutcome(status=TurnStatus.CANCELLED, error="the turn was cancelled")

    async def _commit(self, outcome: TurnOutcome, changes: FileChanges | None) -> None:
        self.ending = True
        if self.shutting_down and outcome.status is TurnStatus.CANCELLED:
            outcome.status, outcome.error = TurnStatus.INTERRUPTED, SHUTDOWN_REASON
        terminal = self._terminal
        if terminal is None or terminal.type is not outcome.status.terminal_event:
            terminal = self._own_terminal(outcome)
        terminal = make_storable(outcome, terminal)
        end = TurnEnd(
            self.turn_id,
            outcome.status,
            answer=outcome.answer,
            answer_source=outcome.answer_source,
            unverified_reason=outcome.unverified_reason,
            error=outcome.error,
            usage=outcome.usage,
            artifacts=outcome.artifacts,
            evidence=outcome.evidence,
            events=[*self._late, terminal],
            files=changes,
        )
        try:
            await self._finish_with_retries(end)
        except Conflict as exc:
            # It ended elsewhere (another process ended it when this one's lease lapsed): followers get
            # the end that was stored, or one of its kind after events published but never stored.
            log.warning("turn %s: %s", self.turn_id, exc)
            if await self._publish_stored_end():
                return
            terminal = self._own_terminal(await self._stored_outcome())
        except Exception:
            # Followers still learn the end; the stored turn is ended interrupted by whichever process
            # sees its lease lapse (or by the next start-up).
            log.exception("turn %s: could not commit its end", self.turn_id)
        for event in self._late:
            self.channel.publish(event)
        self.channel.publish(terminal)

    async def _publish_stored_end(self) -> bool:
        """Publish the stored events after those published, up to the turn's terminal one; False when
        they could not be read or hold no terminal event (events the journal could not store were
        published, so the stored end may come before them: the turn's own terminal event then stands
        in for it)."""
        after = self.channel.events[-1].seq if self.channel.events else 0
        try:
            while stored := await self.store.events_after(self.turn_id, after):
                for event in stored:
                    self.channel.publish(event)
                if stored[-1].terminal:
                    return True
                after = stored[-1].seq
        except Exception:
            log.exception("turn %s: could not read its stored end", self.turn_id)
        return False

    async def _stored_outcome(self) -> TurnOutcome:
        """How the turn was ended elsewhere, as an outcome: another process ends a running turn only as
        ``interrupted`` (its lease lapsed), with its reason (a lapsed lease's, if it cannot be read)."""
        try:
            reason = (await self.store.get_turn(self.turn_id)).error
        except Exception:
            log.exception("turn %s: could not read how it ended", self.turn_id)
            reason = None
        return TurnOutcome(status=TurnStatus.INTERRUPTED, error=reason or LAPSED_REASON)

    def _own_terminal(self, outcome: TurnOutcome) -> Event:
        payload = outcome.terminal_payload()
        return Event.carrying(
            payload,
            # Replaces the engine's own terminal event, if any (never published), in its place.
            seq=self._terminal.seq if self._terminal is not None else self._last_seq + 1,
            turn_id=self.turn_id,
            ts=time.time(),
            span_id=self._root_span,
            parent_span_id=None,
        )

    async def _finish_with_retries(self, end: TurnEnd) -> None:
        """The end goes into the journal's next group commit; if that fails, the turn commits alone,
        with its events the journal could not store, retried by :func:`commit_retrying`."""
        try:
            await self.journal.finish(end)
            return
        except (Conflict, NotFound):
            raise
        except Exception:
            log.warning("turn %s: its end was not stored with the others; committing it alone", self.turn_id)
        unwritten = await self.journal.flush(self.turn_id)
        alone = replace(end, events=[*unwritten, *end.events])
        await commit_retrying(self.turn_id)(self.store.end_turn, alone)


def commit_retrying(turn_id: str) -> AsyncRetrying:
    """The policy of a turn's final commit: retried after each of :data:`COMMIT_WAITS` (a database
    that blinked), then the last error is raised; a :class:`Conflict` (the turn already ended) and a
    cancellation are final at once."""

    def log_retry(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning("turn %s: commit failed, retrying", turn_id, exc_info=error)

    return AsyncRetrying(
        stop=stop_after_attempt(len(COMMIT_WAITS) + 1),
        wait=wait_chain(*(wait_fixed(seconds) for seconds in COMMIT_WAITS)),
        retry=retry_if_exception_type(Exception) & retry_if_not_exception_type(Conflict),
        before_sleep=log_retry,
        reraise=True,
    )
