"""Eval and optimization runs started over the HTTP API: each runs in the background of the server
process, and is followed by its id until it ends. What a run checks before it starts (labels to
evaluate, the dataset rules, the budget) is checked at once, so a request that cannot run is refused
in its response. A finished run's report stays on disk; its state here lives as long as the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from fleet_rlm.engine.budget import one_line
from fleet_rlm.protocol.events import new_id
from fleet_rlm.quality.dataset import split_dataset
from fleet_rlm.quality.evaluation import reports_dir, run_eval
from fleet_rlm.quality.optimize import check_budget, optimize
from fleet_rlm.service.service import FleetService
from fleet_rlm.store import Invalid, NotFound

log = logging.getLogger(__name__)
RunKind = Literal["eval", "optimization"]
RunStatus = Literal["running", "completed", "failed"]


@dataclass
class Run:
    id: str
    kind: RunKind
    status: RunStatus = "running"
    started_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    finished_at: dt.datetime | None = None
    done: int = 0
    total: int = 0
    error: str | None = None
    result: dict[str, Any] | None = None
    task: asyncio.Task[None] | None = None


class QualityRuns:
    def __init__(self, service: FleetService) -> None:
        self.service = service
        self.runs: dict[str, Run] = {}

    def get(self, run_id: str, kind: RunKind) -> Run:
        run = self.runs.get(run_id)
        if run is None or run.kind != kind:
            raise NotFound({"eval": "eval_run", "optimization": "optimization"}[kind], run_id)
        return run

    def of_kind(self, kind: RunKind) -> list[Run]:
        return [run for run in self.runs.values() if run.kind == kind]

    async def start_eval(self, *, session: str | None, groups: list[str]) -> Run:
        session_id = (await self.service.sessions.get(session)).id if session else None
        labels = await self.service.quality.labels(session_id=session_id, groups=groups)
        if not labels:
            raise Invalid("no labels to evaluate: label captured turns first", code="no_labels")
        run = Run(new_id("eval"), "eval", total=len(labels))

        def progress(done: int, _total: int) -> None:
            run.done = done

        async def work() -> dict[str, Any]:
            report = await run_eval(self.service, labels, on_progress=progress)
            report.run_id = run.id
            await asyncio.to_thread(report.write, reports_dir(self.service.settings, run.id))
            return report.to_json()

        return self._start(run, work)

    async def start_optimization(
        self, *, session: str | None, gepa_budget: str | None, max_metric_calls: int | None
    ) -> Run:
        check_budget(gepa_budget, max_metric_calls)
        session_id = (await self.service.sessions.get(session)).id if session else None
        split_dataset(await self.service.quality.labels(session_id=session_id))
        run = Run(new_id("opt"), "optimization")

        async def work() -> dict[str, Any]:
            done = await optimize(
                self.service, session=session, gepa_budget=gepa_budget, max_metric_calls=max_metric_calls
            )
            return {"version": done.program.version, "gate_passed": done.passed}

        return self._start(run, work)

    def _start(self, run: Run, work: Callable[[], Awaitable[dict[str, Any]]]) -> Run:
        async def runner() -> None:
            try:
                run.result = await work()
                run.status = "completed"
            except asyncio.CancelledError:
                run.status, run.error = "failed", "the server shut down during the run"
                raise
            except Exception as exc:
                log.exception("%s run %s failed", run.kind, run.id)
                run.status, run.error = "failed", one_line(exc)
            finally:
                run.finished_at = dt.datetime.now(dt.UTC)

        self.runs[run.id] = run
        run.task = asyncio.create_task(runner(), name=f"{run.kind}-{run.id}")
        return run

    async def close(self) -> None:
        tasks = [run.task for run in self.runs.values() if run.task is not None and not run.task.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
