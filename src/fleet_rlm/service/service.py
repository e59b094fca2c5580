"""Fleet as a durable service: sessions, files and turns over the store, turns run in the background.

The API layer (and ``fleet sessions``) call this; it owns the running turns of this process, their
live event channels and the sandbox pool. At start-up it migrates the database, marks turns left
running by dead processes ``interrupted``, reaps their sandboxes and drops unreferenced file bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from fleet_rlm.config import ConfigError, Settings
from fleet_rlm.protocol.ids import is_session_id
from fleet_rlm.sandbox.base import SandboxBackend, SandboxLimits, SandboxUnavailable
from fleet_rlm.sandbox.registry import configured_backend
from fleet_rlm.service.archive import sessions as archive
from fleet_rlm.service.files import SessionFiles, stored_path
from fleet_rlm.service.kernels.pool import SandboxPool
from fleet_rlm.service.kernels.registry import KernelRegistry, KernelStatus
from fleet_rlm.service.memory import MemoryBook
from fleet_rlm.service.readiness import Readiness, ReadinessChecks
from fleet_rlm.service.scaleout.leases import LeaseKeeper
from fleet_rlm.service.scaleout.wakeups import Wakeups
from fleet_rlm.service.scaleout.worker import TurnWorker
from fleet_rlm.service.turns.channel import FOLLOW_BATCH, ChannelRegistry
from fleet_rlm.service.turns.engines import OwnThreads, TurnEngine
from fleet_rlm.service.turns.execution import TurnExecution
from fleet_rlm.service.turns.journal import EventJournal
from fleet_rlm.service.turns.processes import TurnProcesses
from fleet_rlm.service.turns.service import TurnOperations
from fleet_rlm.service.turns.stored_reads import StoredReads
from fleet_rlm.service.turns.submissions import SubmissionQueue
from fleet_rlm.store import (
    BlobStore,
    Conflict,
    Database,
    FileRecord,
    Interrupting,
    NotFound,
    SessionRecord,
    Store,
    StoreError,
    TurnRecord,
)
from fleet_rlm.store.notify import Channel, Handler, Listener
from fleet_rlm.store.runners import is_dead, new_runner_id
from fleet_rlm.store.session_settings import check_session_settings
from fleet_rlm.store.shared_blobs import DatabaseBlobs
from fleet_rlm.workspace.kinds import FileKind

if TYPE_CHECKING:
    from fleet_rlm.service.tracing import TurnTracer

log = logging.getLogger(__name__)

INTERRUPTED_REASON = "the server process running the turn stopped before the turn ended"
SHUTDOWN_GRACE_SECONDS = 10.0


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


class FleetService(TurnOperations):
    def __init__(
        self,
        settings: Settings,
        *,
        database: Database | None = None,
        backend: SandboxBackend | None = None,
        tracer: TurnTracer | None = None,
        runs_turns: bool | None = None,
        serves_queue: bool = True,
    ) -> None:
        self.settings = settings
        self.database = database or Database.from_settings(settings)
        self.runs_turns = (settings.worker.in_server or self.database.is_sqlite) if runs_turns is None else runs_turns
        """Whether this process runs turns (``fleet worker``; ``fleet serve`` unless ``worker.in_server``
        is off on PostgreSQL), or only queues them for workers (an API replica)."""
        self.serves_queue = serves_queue
        """Whether this process, if it runs turns, claims any queued turn (a server, a worker) or only
        those it queued itself (a command that ends with its caller: ``fleet mcp``, ``fleet eval
        run``, ``fleet optimize``; another client's turn it would cut short when it exits)."""
        self.store = Store(self.database)
        self.blobs = BlobStore(settings.data_dir / "sessions")
        shared = settings.worker.file_store == "database"
        if shared and self.database.is_sqlite:
            raise ConfigError(
                'worker.file_store = "database" shares session files between machines through PostgreSQL; '
                "on SQLite (one machine) keep it local (FLEET_WORKER_FILE_STORE=local)"
            )
        self.files = SessionFiles(self.blobs, DatabaseBlobs(self.database) if shared else None)
        self.memory = MemoryBook(self.store, settings.memory)
        self.runner = new_runner_id()
        self._backend = backend
        self._pool: SandboxPool | None = None
        self.channels = ChannelRegistry()
        self.journal = EventJournal(self.store, self._ended_elsewhere)
        self.submissions = SubmissionQueue(self.store)
        self.executions: dict[str, TurnExecution] = {}
        self.interrupted_at_start: list[TurnRecord] = []
        self.reaped_at_start: list[dict[str, Any]] = []
        self._readiness = ReadinessChecks(self.database, settings.lm, lambda: self.backend, lambda: self._pool)
        self._cleanups: set[asyncio.Task[None]] = set()
        self._abandons: set[asyncio.Task[None]] = set()
        """The cancels of turns whose callers went away, in the background (:meth:`abandon_turn`)."""
        self.shutting_down = False
        """Set when the process starts to stop (:meth:`begin_shutdown`): callers cut off from then on
        do not abandon their turns."""
        self._drain_cut = asyncio.Event()
        """Set by a second signal (:meth:`cut_drain`): the drain's wait for running turns ends."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self.tracer = tracer if tracer is not None else configured_tracer(settings)
        self._kernels: KernelRegistry | None = None
        self.wakeups = Wakeups(self.store.still_queued)
        self.stored_reads = StoredReads(self.store, limit=FOLLOW_BATCH)
        self.worker: TurnWorker | None = None
        self.engine: TurnEngine = OwnThreads()
        self._leases: LeaseKeeper | None = None
        self._listener: Listener | None = None

    @property
    def kernels(self) -> KernelRegistry:
        """The session kernels this process keeps live between turns (docs/kernels.md)."""
        if self._kernels is None:
            self._kernels = KernelRegistry(
                self.pool, self.blobs.root, self.settings.sandbox, existing=self.store.existing_sessions
            )
        return self._kernels

    @property
    def kernel_affinity_seconds(self) -> float:
        """How long a queued turn is left to the runner keeping its session's kernel (0: on SQLite,
        one process runs every turn; and without kernels there is nothing to keep)."""
        if self.database.is_sqlite or not self.kernels.enabled:
            return 0.0
        return self.settings.worker.kernel_affinity_seconds

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
        """Migrate and reconcile; with ``run_turns`` (a server or a worker does; ``fleet sessions`` does
        not) also serve: keep turn leases, listen for other processes and, if this process runs turns,
        warm the sandbox pool and claim queued turns."""
        self._loop = asyncio.get_running_loop()
        await self.database.migrate()
        self.interrupted_at_start = await self.store.interrupt_turns(
            Interrupting(runner_gone_for=self.runner), INTERRUPTED_REASON
        )
        for turn in self.interrupted_at_start:
            log.warning("turn %s of session %s was left %s: now interrupted", turn.id, turn.session_id, "running")
        if not run_turns:
            return
        if self.runs_turns or self.files.shared is not None:  # a replica's own data directory is a cache
            await self._collect_garbage()
        if self.runs_turns:
            self.reaped_at_start = self.pool.reap(lambda runner: is_dead(runner, self.runner))
            await self._prepare_backend()
            if self.settings.worker.turn_processes:
                self.engine = TurnProcesses(self.settings.worker.turn_processes)
                await self.engine.start()
            self.pool.start()
            self.kernels.start()
            limit = self.settings.server.max_running_turns
            self.worker = TurnWorker(
                self.store,
                self.runner,
                limit or None,
                self.settings.worker.lease_seconds,
                self._run_claimed,
                affinity_seconds=self.kernel_affinity_seconds,
                serves_queue=self.serves_queue,
            )
        self._leases = LeaseKeeper(
            self.store,
            self.runner,
            self.settings.worker.lease_seconds,
            lambda: list(self.executions),
            self._cancel_here,
            lambda turn: self.wakeups.wake(turn.id),
            self._ended_elsewhere,
        )
        self._leases.start(renew=self.runs_turns)
        if not self.database.is_sqlite:
            handlers: dict[Channel, Handler] = {Channel.EVENTS: self.wakeups.wake}
            if self.runs_turns:
                handlers[Channel.CANCEL] = self._leases.renew_now
            if self.worker is not None:
                handlers[Channel.QUEUED] = self.worker.wake
            self._listener = Listener(self.database, handlers, self._caught_up)
            self._listener.start()
        if self.worker is not None:
            self.worker.start()

    def _caught_up(self) -> None:
        """After the listening connection came back: whatever was missed meanwhile is looked at again."""
        self.wakeups.wake_all()
        if self.worker is not None:
            self.worker.wake()

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
                keep = await self._kept_blobs(session_id)
                await asyncio.to_thread(self.blobs.collect_garbage, session_id, keep)
                await self.files.share_unshared(session_id, keep)
        if self.files.shared is not None:
            await self.files.shared.collect_garbage(self._kept_blobs)

    async def _kept_blobs(self, session_id: str) -> set[str]:
        return await self.store.referenced_blobs(session_id) | await self.store.replay_blobs(session_id)

    @property
    def shutdown_drain_seconds(self) -> float:
        """How long a server's shutdown (SIGTERM) lets this process's running turns finish: as long as a
        worker's drain (``worker.drain_seconds``) when it runs turns on PostgreSQL, where the other
        replicas serve their streams meanwhile; none on SQLite, where nothing else could (its turns end
        ``interrupted`` at once)."""
        if self.runs_turns and not self.database.is_sqlite:
            return self.settings.worker.drain_seconds
        return 0.0

    def begin_shutdown(self) -> None:
        """The process is about to stop (its server got SIGTERM and cuts its streams): the requests cut
        off now were cut by the shutdown, not left by their callers, so their turns are not abandoned
        (:meth:`abandon_turn`). Safe in a signal handler."""
        self.shutting_down = True

    def cut_drain(self) -> None:
        """Stop waiting for the running turns to finish (a second signal): they end ``interrupted`` now.
        Safe in a signal handler."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._drain_cut.set)

    async def stop(self, *, drain: float = 0.0) -> None:
        """Stop claiming turns; give running ones ``drain`` seconds to finish; stop the rest (they end
        ``interrupted``), tear the pool down, close the database."""
        self.begin_shutdown()
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
            cut = asyncio.ensure_future(self._drain_cut.wait())
            await asyncio.wait([finished, cut], timeout=drain, return_when=asyncio.FIRST_COMPLETED)
            for waiting in (finished, cut):
                waiting.cancel()
            if self._drain_cut.is_set():
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
        if self._leases is not None:
            await self._leases.close()
        if self._listener is not None:
            await self._listener.close()
        await self.engine.close()
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
        if self.files.shared is not None:
            await self.files.shared.remove_session(record.id)
        return record

    # Kernels ----------------------------------------------------------------------------------

    async def kernel_status(self, ref: str) -> KernelStatus:
        """The session's kernel: live or not, since when, idle for, memory, variables, snapshot."""
        session = await self.store.get_session(ref)
        await self.kernels.settled(session.id)
        return await asyncio.to_thread(self.kernels.status, session.id)

    async def kernel_summary(self) -> tuple[int, int]:
        """How many session kernels are live in this process, and their resident memory in bytes."""
        return await self._kernels.summary() if self._kernels is not None else (0, 0)

    async def restart_kernel(self, ref: str) -> KernelStatus:
        """End the session's kernel and drop its snapshot (Conflict while a turn runs on it): here at
        once; in another process that keeps it (a worker), before the session's next turn there."""
        session = await self.store.get_session(ref)
        await self.store.reset_kernel(session.id)
        # Busy here only while its turn, ended in the database, lets go of it: ended before the next turn.
        with contextlib.suppress(Conflict):
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
            await self.files.share(session.id, [record.sha256])
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
        return list(zip(records, await self.files.kinds(session.id, records), strict=True))

    async def file_for_download(self, session_ref: str, rel: str) -> tuple[FileRecord, Path]:
        path = stored_path(rel)
        session = await self.store.get_session(session_ref)
        record = await self.store.get_file(session.id, path)
        await self.files.fetch_records(session.id, [record])
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
        return await archive.export_session(self.store, self.files, ref, destination)

    async def import_session(self, source: IO[bytes], *, name: str | None = None) -> SessionRecord:
        """Restore an archive as a new session under a new id; its memory entries wait for review again."""
        return await archive.import_session(
            self.store, self.files, source, self.settings.server, self.settings.memory, name=name
        )
