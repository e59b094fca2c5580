"""Is the server ready? The database answers and sandboxes start; the model endpoint is reported beside."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from fleet_rlm.config.sections import LMSettings
from fleet_rlm.models.endpoint import probe_endpoint
from fleet_rlm.sandbox.base import BackendCheck, SandboxBackend
from fleet_rlm.service.kernels.pool import SandboxPool
from fleet_rlm.store.database import Database

SANDBOX_CHECK_TTL_SECONDS = 60.0
MODEL_CHECK_TTL_SECONDS = 10.0


@dataclass(frozen=True)
class Readiness:
    database: BackendCheck
    sandbox: BackendCheck
    model: BackendCheck
    """Reported, not required: sessions, files and history are served while the model endpoint is down,
    and a provider's outage should not take every replica out of a load balancer."""

    @property
    def ok(self) -> bool:
        return self.database.ok and self.sandbox.ok


class ReadinessChecks:
    """The checks, each remembered for a while so that a polled readiness endpoint stays cheap."""

    def __init__(
        self,
        database: Database,
        lm: LMSettings,
        backend: Callable[[], SandboxBackend],
        pool: Callable[[], SandboxPool | None],
    ) -> None:
        self.database = database
        self.lm = lm
        self.backend = backend
        self.pool = pool
        self._sandbox_ok_until = 0.0
        self._model: tuple[float, BackendCheck] | None = None

    async def check(self) -> Readiness:
        try:
            await self.database.ping()
            database = BackendCheck(True, f"database reachable ({self.database.url.get_backend_name()})")
        except Exception as exc:
            database = BackendCheck(False, f"database unreachable: {type(exc).__name__}: {exc}")
        sandbox = await self._sandbox()
        pool = self.pool()
        if sandbox.ok and pool is not None and pool.last_error and not pool.idle_count:
            sandbox = BackendCheck(False, f"sandboxes fail to start: {pool.last_error}")
        return Readiness(database=database, sandbox=sandbox, model=await self._model_check())

    async def _model_check(self) -> BackendCheck:
        """The model endpoint's probe (the one ``fleet doctor`` runs), remembered for a few seconds, any
        result, so that a polled readiness check does not poll the model server as often."""
        now = time.monotonic()
        if self._model is None or self._model[0] <= now:
            probe = await asyncio.to_thread(probe_endpoint, self.lm)
            self._model = (now + MODEL_CHECK_TTL_SECONDS, BackendCheck(probe.ok, probe.message, probe.fix))
        return self._model[1]

    async def _sandbox(self) -> BackendCheck:
        """The backend's own check (it starts a sandbox), remembered for a while once it passes."""
        now = time.monotonic()
        if self._sandbox_ok_until > now:
            return BackendCheck(True, "sandbox backend usable")
        try:
            check = await asyncio.to_thread(self.backend().check)
        except Exception as exc:
            check = BackendCheck(False, f"sandbox backend unusable: {type(exc).__name__}: {exc}")
        if check.ok:
            self._sandbox_ok_until = now + SANDBOX_CHECK_TTL_SECONDS
        return check
