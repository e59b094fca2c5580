"""Fleet as a durable service: sessions, files and turns over the store, turns run in the background.

The API layer (and ``fleet sessions``) call this; it owns the running turns of this process, their
live event channels and the sandbox pool. At start-up it migrates the database, marks turns left
running by dead processes ``interrupted``, reaps their sandboxes and drops unreferenced file bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from fleet_rlm.config import Ceilings, ConfigError, Settings
from fleet_rlm.protocol.events import Event
from fleet_rlm.protocol.ids import is_session_id
from fleet_rlm.sandbox.base import SandboxBackend, SandboxLimits, SandboxUnavailable
from fleet_rlm.sandbox.registry import configured_backend
from fleet_rlm.service import archive
from fleet_rlm.service.channel import ChannelRegistry
from fleet_rlm.service.execution import TurnExecution, TurnPlan
from fleet_rlm.service.files import SessionFiles, clean_path, stored_path
from fleet_rlm.service.kernels import KernelRegistry, KernelStatus
from fleet_rlm.service.memory import MemoryBook
from fleet_rlm.service.overrides import check_session_settings, effective_settings
from fleet_rlm.service.pool import SandboxPool
from fleet_rlm.service.readiness import Readiness, ReadinessChecks
from fleet_rlm.service.runners import is_dead, new_runner_id
from fleet_rlm.service.writer import EventJournal
from fleet_rlm.store import (
    BlobStore,
    Conflict,
    Database,
    FileRecord,
    Invalid,
    NotFound,
    SessionRecord,
    Store,
    StoreError,
    TurnRecord,
)
from fleet_rlm.workspace.kinds import FileKind

if TYPE_CHECKING:
    from fleet_rlm.service.tracing import TurnTracer

log = logging.getLogger(__name__)

INTERRUPTED_REASON = "the server process running the turn stopped before the turn ended"
STORED_POLL_SECONDS = 0.5
SHUTDOWN_GRACE_SECONDS = 10.0


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


def configured_tracer(settings: Settings) -> TurnTracer | None:
    """The tracer the settings ask for (None: tracing is off); tracing needs the optional extra."""
    if not settings.tracing.on:
        return None
    try:
        from fleet_rlm.service.tracing import tracer_from_settings

        return tracer_from_settings(settings)
    except ImportError as exc:
        raise ConfigError(
            "tracing is on (FLEET_OTEL_EXPORTER_OTLP_ENDPOINT, FLEET_TRACE_TURNS or FLEET_MLFLOW_TRACKING_URI) "
            f"but its extra is not installed: pip install 'fleet-rlm[tracing]' ({exc})"
        ) from exc


class FleetService:
    def __init__(
        self,
        settings: Settings,
        *,
        database: Database | None = None,
        backend: SandboxBackend | None = None,
        tracer: TurnTracer | None = None,
    ) -> None:
        self.settings = settings
        self.database = database or Database.from_settings(settings)
        self.store = Store(self.database)
        self.blobs = BlobStore(settings.data_dir / "sessions")
        self.files = SessionFiles(self.blobs)
        self.memory = MemoryBook(self.store, settings.memory)
        self.runner = new_runner_id()
        self._backend = backend
        self._pool: SandboxPool | None = None
        self.channels = ChannelRegistry()
        self.journal = EventJournal(self.store)
        self.executions: dict[str, TurnExecution] = {}
        self.interrupted_at_start: list[TurnRecord] = []
        self.reaped_at_start: list[dict[str, Any]] = []
        self._readiness = ReadinessChecks(self.database, settings.lm, lambda: self.backend, lambda: self._pool)
        self._slots: asyncio.Semaphore | None = None
        self._cleanups: set[asyncio.Task[None]] = set()
        self.tracer = tracer if tracer is not None else configured_tracer(settings)
        self._kernels: KernelRegistry | None = None

    @property
    def kernels(self) -> KernelRegistry:
        """The session kernels this process keeps live between turns (docs/kernels.md)."""
        if self._kernels is None:
            self._kernels = KernelRegistry(self.pool, self.blobs.root, self.settings.sandbox)
        return self._kernels

    @property
    def backend(self) -> SandboxBackend:
        if self._backend is None:
            self._backend = configured_backend(self.settings)
        return self._backend

    @property
    def pool(self) -> SandboxPool:
        if self._pool is None:
            self._pool = SandboxPool(
                self.backend,
                self.settings.data_dir / "sandboxes",
                self.settings.sandbox.pool_size,
                SandboxLimits.from_settings(self.settings.sandbox, self.settings.budget),
                self.runner,
            )
        return self._pool

    # Lifecycle --------------------------------------------------------------------------------

    async def start(self, *, run_turns: bool = True) -> None:
        """Migrate and reconcile; with ``run_turns`` also warm the sandbox pool (a server does;
        ``fleet sessions`` does not)."""
        await self.database.migrate()
        self.interrupted_at_start = await self.store.interrupt_turns(
            lambda turn: is_dead(turn.runner, self.runner), INTERRUPTED_REASON
        )
        for turn in self.interrupted_at_start:
            log.warning("turn %s of session %s was left %s: now interrupted", turn.id, turn.session_id, "running")
        if run_turns:
            self.reaped_at_start = self.pool.reap(lambda runner: is_dead(runner, self.runner))
            await self._collect_garbage()
            await self._prepare_backend()
            self.pool.start()
            self.kernels.start()

    async def _prepare_backend(self) -> None:
        """Build what sandboxes need (the sandbox environment) before the pool starts any; a failure is
        logged and each sandbox then reports it."""
        try:
            await asyncio.to_thread(self.backend.prepare)
        except SandboxUnavailable as exc:
            log.error("sandboxes cannot start: %s", exc)

    async def _collect_garbage(self) -> None:
        known = await self.store.session_ids()
        for session_id in self.blobs.session_ids():
            if session_id not in known:
                await asyncio.to_thread(self.blobs.remove_session, session_id)
            else:
                keep = await self.store.referenced_blobs(session_id) | await self.store.replay_blobs(session_id)
                await asyncio.to_thread(self.blobs.collect_garbage, session_id, keep)

    async def stop(self) -> None:
        """Stop running turns (they end ``interrupted``), tear the pool down, close the database."""
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
        if self._kernels is not None:
            await self._kernels.close()
        if self._pool is not None:
            await self._pool.close()
        await self.database.dispose()

    async def readiness(self) -> Readiness:
        return await self._readiness.check()

    # Sessions ---------------------------------------------------------------------------------

    async def create_session(
        self,
        *,
        name: str | None = None,
        title: str | None = None,
        mode: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> SessionRecord:
        checked = check_session_settings(settings, self.settings.server.ceilings)
        if mode is not None:
            check_session_settings({"mode": mode}, self.settings.server.ceilings)
        return await self.store.create_session(name=name, title=title, mode=mode, settings=checked)

    async def get_session(self, ref: str) -> SessionRecord:
        """The session with id or unique name ``ref``; raises NotFound."""
        return await self.store.get_session(ref)

    async def open_session(self, ref: str) -> SessionRecord:
        """The session with id or name ``ref``, created under that name when no session has it (an
        unknown id is not created: NotFound)."""
        try:
            return await self.store.get_session(ref)
        except NotFound:
            if is_session_id(ref):
                raise
        try:
            return await self.store.create_session(name=ref)
        except Conflict:  # created meanwhile by another call
            return await self.store.get_session(ref)

    async def list_sessions(self, *, limit: int = 50, offset: int = 0) -> list[SessionRecord]:
        """Sessions, most recently active first."""
        return await self.store.list_sessions(limit=limit, offset=offset)

    async def update_session(self, ref: str, **changes: Any) -> SessionRecord:
        if "settings" in changes:
            changes["settings"] = check_session_settings(changes["settings"], self.settings.server.ceilings)
        if changes.get("mode") is not None:
            check_session_settings({"mode": changes["mode"]}, self.settings.server.ceilings)
        return await self.store.update_session(ref, **changes)

    async def delete_session(self, ref: str) -> SessionRecord:
        record = await self.store.delete_session(ref)
        if self._kernels is not None:
            await self._kernels.forget(record.id)
        await asyncio.to_thread(self.blobs.remove_session, record.id)
        return record

    # Kernels ----------------------------------------------------------------------------------

    async def kernel_status(self, ref: str) -> KernelStatus:
        """The session's kernel: live or not, since when, idle for, memory, variables, snapshot."""
        session = await self.store.get_session(ref)
        await self.kernels.settled(session.id)
        return await asyncio.to_thread(self.kernels.status, session.id)

    def kernel_summary(self) -> tuple[int, int]:
        """How many session kernels are live in this process, and their resident memory in bytes."""
        return self._kernels.summary() if self._kernels is not None else (0, 0)

    async def restart_kernel(self, ref: str) -> KernelStatus:
        """End the session's kernel and drop its snapshot (Conflict while a turn runs on it)."""
        session = await self.store.get_session(ref)
        await self.kernels.restart(session.id)
        return await asyncio.to_thread(self.kernels.status, session.id)

    # Files ------------------------------------------------------------------------------------

    async def upload_file(
        self, session_ref: str, rel: str, source: Any, *, declared_type: str | None = None
    ) -> tuple[FileRecord, FileKind]:
        """Store ``source`` at ``files/<rel>`` (replacing what was there); returns it and its kind."""
        session = await self.store.get_session(session_ref)
        limit = self.settings.server.upload_limit_mb * 1024 * 1024
        try:
            record = await asyncio.to_thread(self.files.store_upload, session.id, rel, source, limit, declared_type)
            stored = await self.store.put_file(session.id, record)
        except (FileNotFoundError, NotFound, Conflict) as exc:
            raise await self._upload_cut_short(session_ref, session.id, exc) from exc
        return stored, await asyncio.to_thread(self.files.kind, session.id, stored)

    async def _upload_cut_short(self, session_ref: str, session_id: str, exc: Exception) -> StoreError:
        """Why an upload's bytes or record could not be stored: its session was deleted meanwhile
        (deleting removes the session's blob directory, the upload's staging file with it; what the
        upload wrote after that is removed here), or it changed under the upload."""
        try:
            await self.store.get_session(session_id)
        except NotFound:
            await asyncio.to_thread(self.blobs.remove_session, session_id)
            return NotFound("session", session_ref)
        if isinstance(exc, StoreError):
            return exc
        return Conflict(
            "the session's files changed while the upload was stored; send it again", code="upload_conflict"
        )

    async def list_files(self, session_ref: str) -> list[tuple[FileRecord, FileKind]]:
        session = await self.store.get_session(session_ref)
        records = await self.store.list_files(session.id)
        kinds = await asyncio.to_thread(lambda: [self.files.kind(session.id, r) for r in records])
        return list(zip(records, kinds, strict=True))

    async def file_for_download(self, session_ref: str, rel: str) -> tuple[FileRecord, Path]:
        path = stored_path(rel)
        session = await self.store.get_session(session_ref)
        record = await self.store.get_file(session.id, path)
        blob = self.files.blob_path(session.id, record)
        if not await asyncio.to_thread(blob.is_file):  # the session is being deleted
            raise NotFound("file", path)
        return record, blob

    async def delete_file(self, session_ref: str, rel: str) -> FileRecord:
        """Forget a file; its bytes are dropped at the next start-up if nothing else uses them."""
        path = stored_path(rel)
        session = await self.store.get_session(session_ref)
        return await self.store.delete_file(session.id, path)

    async def export_session(self, ref: str, destination: IO[bytes]) -> SessionRecord:
        """Write the session's portable archive (history, events, files, artifacts, the memory its turns proposed)."""
        return await archive.export_session(self.store, self.blobs, ref, destination)

    async def import_session(self, source: IO[bytes], *, name: str | None = None) -> SessionRecord:
        """Restore an archive as a new session under a new id; its memory entries wait for review again."""
        return await archive.import_session(
            self.store, self.blobs, source, self.settings.server, self.settings.memory, name=name
        )

    # Turns ------------------------------------------------------------------------------------

    async def submit_turn(
        self, session_ref: str, submission: TurnSubmission, *, idempotency_key: str | None = None
    ) -> tuple[TurnRecord, bool]:
        """Queue a turn and start it in the background; returns it and whether it is new."""
        if not submission.message.strip():
            raise Invalid("the message is empty", code="invalid_request")
        context_paths = [clean_path(p) for p in submission.context_paths]
        options = submission.options(self.settings.server.ceilings)
        session = await self.store.get_session(session_ref)
        try:  # stored before a ceiling was lowered, say
            check_session_settings(session.settings, self.settings.server.ceilings)
        except Invalid as exc:
            raise Invalid(f"this session's {exc.message}; change it with PATCH", code=exc.code) from exc
        turn, created = await self.store.create_turn(
            session.id,
            submission.message,
            context_paths=context_paths,
            options=options,
            idempotency_key=idempotency_key,
            runner=self.runner,
        )
        if created:
            settings = effective_settings(self.settings, {"mode": session.mode}, session.settings, options)
            plan = TurnPlan(turn=turn, session=session, settings=settings, history=submission.history)
            channel = self.channels.open(turn.id)
            if self.tracer is not None:
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
                self._running_slots(),
                kernels=self.kernels,
            )
            self.executions[turn.id] = execution
            execution.start().add_done_callback(lambda _task: self._forget(turn.id))
        return turn, created

    def _keeping_trace_id(self, turn_id: str) -> Callable[[str], None]:
        """Stores a turn's trace id on it as soon as its trace starts, moments after the turn's start."""

        loop = asyncio.get_running_loop()

        async def store(trace_id: str) -> None:
            try:
                await self.store.set_trace_id(turn_id, trace_id)
            except Exception:
                log.exception("turn %s: could not store its trace id", turn_id)

        def start_storing(trace_id: str) -> None:
            task = asyncio.create_task(store(trace_id))
            self._cleanups.add(task)
            task.add_done_callback(self._cleanups.discard)

        def keep(trace_id: str) -> None:  # on a tracing thread
            loop.call_soon_threadsafe(start_storing, trace_id)

        return keep

    def _running_slots(self) -> asyncio.Semaphore | None:
        """How many turns may run at once in this process; the rest wait ``queued``, in order."""
        if self.settings.server.max_running_turns == 0:
            return None
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.settings.server.max_running_turns)
        return self._slots

    def _forget(self, turn_id: str) -> None:
        self.executions.pop(turn_id, None)
        self.channels.discard(turn_id)

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
        if turn.active:
            raise Conflict(f"turn {turn_id} is run by another server process ({turn.runner})", code="turn_elsewhere")
        raise Conflict(f"turn {turn_id} already ended as {turn.status}", code="turn_not_active")

    async def events(self, turn_id: str, after_seq: int = 0) -> AsyncIterator[Event]:
        """A turn's events after ``after_seq``: replayed, then live until the terminal event.
        Raises NotFound up front. Keeping a quiet connection alive is the transport's job."""
        channel = self.channels.get(turn_id)
        if channel is None:
            await self.store.get_turn(turn_id)
        return self._events(turn_id, after_seq)

    async def _events(self, turn_id: str, after_seq: int) -> AsyncIterator[Event]:
        last = after_seq
        while True:
            channel = self.channels.get(turn_id)
            if channel is not None:
                async for event in channel.follow(last):
                    yield event
                return
            stored = await self.store.events_after(turn_id, last, limit=500)
            for event in stored:
                yield event
                last = event.seq
                if event.terminal:
                    return
            if stored:
                continue
            # Nothing stored after ``last``: finished (no terminal stored, e.g. legacy), or run
            # by another process, whose progress we can only poll.
            turn = await self.store.get_turn(turn_id)
            if not turn.active and self.channels.get(turn_id) is None:
                if not await self.store.events_after(turn_id, last, limit=1):
                    return
                continue
            await asyncio.sleep(STORED_POLL_SECONDS)

    async def stored_events(self, turn_id: str, *, limit: int) -> list[Event]:
        """The turn's events stored so far, the first ``limit``, without following it; raises NotFound."""
        await self.store.get_turn(turn_id)
        return await self.store.events_after(turn_id, 0, limit=limit)

    def abandon_turn(self, turn_id: str) -> None:
        """Cancel the turn if this process still runs it (its caller went away); never waits, so a
        request being torn down can call it."""
        execution = self.executions.get(turn_id)
        if execution is not None:
            execution.cancel()

    def delete_when_done(self, session_id: str, turn_id: str) -> None:
        """Delete an ephemeral session once its turn has ended (in the background)."""

        async def delete() -> None:
            await self.wait_for_turn(turn_id)
            try:
                await self.delete_session(session_id)
            except StoreError as exc:
                log.warning("could not delete the ephemeral session %s: %s", session_id, exc)

        task = asyncio.get_running_loop().create_task(delete(), name=f"delete-{session_id}")
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def wait_for_turn(self, turn_id: str) -> TurnRecord:
        """Block until the turn ends (tests and the CLI use this)."""
        execution = self.executions.get(turn_id)
        if execution is not None and execution.task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(execution.task)
        return await self.store.get_turn(turn_id)
