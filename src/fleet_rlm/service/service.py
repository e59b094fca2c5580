"""Fleet as a durable service: where its sub-services are built and wired.

The API layer, the CLI and ``fleet_rlm.quality`` use the sub-services: :attr:`FleetService.sessions`,
:attr:`~FleetService.files`, :attr:`~FleetService.turns`, :attr:`~FleetService.kernels`,
:attr:`~FleetService.archives`, :attr:`~FleetService.memory` and :attr:`~FleetService.quality`. At
start-up the service migrates the database, marks turns left running by dead processes
``interrupted``, reaps their sandboxes and drops unreferenced file bytes.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleet_rlm.config import ConfigError, Settings
from fleet_rlm.sandbox.base import SandboxBackend
from fleet_rlm.service.archive.service import ArchiveService
from fleet_rlm.service.file_service import FileService
from fleet_rlm.service.files import SessionFiles
from fleet_rlm.service.kernels.service import KernelService
from fleet_rlm.service.memory import MemoryBook
from fleet_rlm.service.quality_data import QualityData
from fleet_rlm.service.readiness import Readiness, ReadinessChecks
from fleet_rlm.service.scaleout.service import ScaleOut
from fleet_rlm.service.sessions import SessionService
from fleet_rlm.service.turns.service import TurnService
from fleet_rlm.store import BlobStore, Database, Interrupting, Store, TurnRecord
from fleet_rlm.store.runners import new_runner_id
from fleet_rlm.store.shared_blobs import DatabaseBlobs

if TYPE_CHECKING:
    from fleet_rlm.service.tracing import TurnTracer

log = logging.getLogger(__name__)

INTERRUPTED_REASON = "the server process running the turn stopped before the turn ended"


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


@dataclass(frozen=True)
class ServiceParts:
    """The parts the sub-services share, for the service's own modules and for tests that look at
    what it stored; nothing else in Fleet reaches them (``tests/service/test_floor_plan.py``)."""

    database: Database
    store: Store
    session_files: SessionFiles
    runner: str

    @property
    def blobs(self) -> BlobStore:
        return self.session_files.blobs


@dataclass(frozen=True)
class Reconciled:
    """What a start found left by processes that died: their turns (now interrupted) and sandboxes."""

    interrupted: list[TurnRecord] = field(default_factory=list)
    reaped: list[dict[str, Any]] = field(default_factory=list)


class FleetService:
    def __init__(
        self,
        settings: Settings,
        *,
        database: Database | None = None,
        backend: SandboxBackend | None = None,
        tracer: TurnTracer | None = None,
        runs_turns: bool | None = None,
        serves_queue: bool = True,
        runner: str | None = None,
    ) -> None:
        """``runner``: this process's runner id (a new one by default; tests that stand for several
        processes in one give each its own)."""
        self.settings = settings
        database = database or Database.from_settings(settings)
        self._runs_turns = (settings.worker.in_server or database.is_sqlite) if runs_turns is None else runs_turns
        """Whether this process runs turns (``fleet worker``; ``fleet serve`` unless ``worker.in_server``
        is off on PostgreSQL), or only queues them for workers (an API replica)."""
        self._serves_queue = serves_queue
        """Whether this process, if it runs turns, claims any queued turn (a server, a worker) or only
        those it queued itself (a command that ends with its caller: ``fleet mcp``, ``fleet eval
        run``, ``fleet optimize``; another client's turn it would cut short when it exits)."""
        shared = settings.worker.file_store == "database"
        if shared and database.is_sqlite:
            raise ConfigError(
                'worker.file_store = "database" shares session files between machines through PostgreSQL; '
                "on SQLite (one machine) keep it local (FLEET_WORKER_FILE_STORE=local)"
            )
        store = Store(database)
        blobs = BlobStore(settings.data_dir / "sessions")
        files = SessionFiles(blobs, DatabaseBlobs(database) if shared else None)
        runner = runner or new_runner_id()
        self.parts = ServiceParts(database, store, files, runner)
        self.memory = MemoryBook(store, settings.memory)
        self.kernels = KernelService(
            settings, store, runner, backend=backend, sessions_root=blobs.root, on_sqlite=database.is_sqlite
        )
        self.sessions = SessionService(store, files, self.kernels, settings.server.ceilings)
        self.files = FileService(store, files, settings.server.upload_limit_mb)
        self.turns = TurnService(
            settings,
            store,
            runner,
            files,
            self.memory,
            self.kernels,
            tracer=tracer if tracer is not None else configured_tracer(settings),
            delete_session=self.sessions.delete,
        )
        self.archives = ArchiveService(store, files, settings)
        self.quality = QualityData(store, files, self.kernels)
        self._scaleout = ScaleOut(settings, database, store, runner, self.turns)
        self._readiness = ReadinessChecks(
            database, settings.lm, lambda: self.kernels.backend, lambda: self.kernels.pool_if_built
        )
        self._drain_cut = asyncio.Event()
        """Set by a second signal (:meth:`cut_drain`): the drain's wait for running turns ends."""
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self, *, run_turns: bool = True) -> Reconciled:
        """Migrate and reconcile; with ``run_turns`` (a server or a worker does; ``fleet sessions`` does
        not) also serve: keep turn leases, listen for other processes and, if this process runs turns,
        warm the sandbox pool and claim queued turns."""
        self._loop = asyncio.get_running_loop()
        parts = self.parts
        await parts.database.migrate()
        interrupted = await parts.store.interrupt_turns(Interrupting(runner_gone_for=parts.runner), INTERRUPTED_REASON)
        for turn in interrupted:
            log.warning("turn %s of session %s was left %s: now interrupted", turn.id, turn.session_id, "running")
        reconciled = Reconciled(interrupted)
        if not run_turns:
            return reconciled
        if self._runs_turns or parts.session_files.shared is not None:  # a replica's own data directory is a cache
            await self.files.collect_garbage()
        if self._runs_turns:
            reconciled = Reconciled(interrupted, await self.kernels.start())
            await self.turns.start(serves_queue=self._serves_queue)
        self._scaleout.start(runs_turns=self._runs_turns)
        self.turns.claim_queued()
        return reconciled

    @property
    def shutdown_drain_seconds(self) -> float:
        """How long a server's shutdown (SIGTERM) lets this process's running turns finish: as long as a
        worker's drain (``worker.drain_seconds``) when it runs turns on PostgreSQL, where the other
        replicas serve their streams meanwhile; none on SQLite, where nothing else could (its turns end
        ``interrupted`` at once)."""
        if self._runs_turns and not self.parts.database.is_sqlite:
            return self.settings.worker.drain_seconds
        return 0.0

    def begin_shutdown(self) -> None:
        """The process is about to stop (its server got SIGTERM and cuts its streams): the requests cut
        off now were cut by the shutdown, not left by their callers, so their turns are not abandoned
        (:meth:`TurnService.abandon`). Safe in a signal handler."""
        self.turns.shutting_down = True

    def cut_drain(self) -> None:
        """Stop waiting for the running turns to finish (a second signal): they end ``interrupted`` now.
        Safe in a signal handler."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._drain_cut.set)

    async def stop(self, *, drain: float = 0.0) -> None:
        """Stop claiming turns; give running ones ``drain`` seconds to finish; stop the rest (they end
        ``interrupted``), tear the pool down, close the database."""
        await self.turns.stop(drain=drain, drain_cut=self._drain_cut)
        await self._scaleout.close()
        await self.kernels.close()
        await self.parts.database.dispose()

    async def readiness(self) -> Readiness:
        return await self._readiness.check()
