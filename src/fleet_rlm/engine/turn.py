"""One turn: a fresh ``dspy.RLM`` over the task and the workspace manifest, on the sandbox the backend
gives it (a fresh one, or in the server the session's kernel, whose variables live on between turns).

The RLM runs on a worker thread; :meth:`Turn.run` waits for it, the turn deadline or a cancel,
whichever comes first, and always ends the event stream with exactly one terminal event. On
cancel or deadline the sandbox is killed and the model wait abandoned (further model calls of the
abandoned thread are refused by the budget), so the turn ends within a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy
from dspy.primitives import CodeInterpreterError

from fleet_rlm.config import Settings
from fleet_rlm.engine.adapters import SchemaAdapter, turn_adapter
from fleet_rlm.engine.budget import BudgetExceeded, TurnBudget, TurnCancelled, budget_error_in, one_line
from fleet_rlm.engine.delegation import Delegation
from fleet_rlm.engine.emitter import EventEmitter
from fleet_rlm.engine.evidence import pick_evidence
from fleet_rlm.engine.honesty import (
    MODULE_UNVERIFIED_REASON,
    LoopGuard,
    could_not_compute,
    direct_unverified_reason,
    extracted_unverified_reason,
    incomplete_in,
    unread_inputs_reason,
)
from fleet_rlm.engine.inputs import Text
from fleet_rlm.engine.lm import MeteredLM, build_lm
from fleet_rlm.engine.memory import ProposeMemory, memory_tools
from fleet_rlm.engine.modes.context import RouteContext
from fleet_rlm.engine.modes.select import RouteRefused, run_route, select_route
from fleet_rlm.engine.observe import TurnObserver, TurnTrace, observed_sandboxes
from fleet_rlm.engine.program import ProgramSpec, render_context
from fleet_rlm.engine.skills import TurnSkills
from fleet_rlm.protocol.events import SCHEMA_VERSION, EventSink, new_id
from fleet_rlm.protocol.payloads import (
    ArtifactCreated,
    ArtifactRecord,
    BudgetExhausted,
    Payload,
    SandboxInfo,
    TurnLimits,
    TurnStarted,
    TurnWarning,
    Usage,
    terminal_payload,
)
from fleet_rlm.protocol.routes import Route
from fleet_rlm.protocol.status import AnswerSource, TurnStatus
from fleet_rlm.sandbox.base import Sandbox, SandboxBackend, SandboxFactory, SandboxLimits, SandboxSpec
from fleet_rlm.sandbox.registry import configured_backend
from fleet_rlm.sandbox.volume import remove_volume_directory
from fleet_rlm.workspace.copyout import MIB, copyable
from fleet_rlm.workspace.hashing import hash_copied_out
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.manifest import build_manifest
from fleet_rlm.workspace.snapshot import changed_between, snapshot
from fleet_rlm.workspace.tree import SHARED_DIR_MODE
from fleet_rlm.workspace.walk import stat_file

ROUTE_ANSWER_SOURCE: dict[str, AnswerSource] = {"direct": "direct", "flex": "module"}


@dataclass
class HistoryEntry:
    message: str
    answer: str | None


@dataclass(frozen=True)
class Announced:
    """A ``turn.started`` the service emitted as it began preparing the turn (before its sandbox was
    ready, so the person sees the turn start at once): the engine does not emit it again, and goes on
    from its ``seq`` under its span."""

    seq: int
    span_id: str


@dataclass
class TurnRequest:
    task: str
    workspace: Path
    turn_id: str = field(default_factory=lambda: new_id("turn"))
    history: list[HistoryEntry] = field(default_factory=list)
    context_paths: list[str] = field(default_factory=list)
    mode: str | None = None
    max_iterations: int | None = None
    max_model_calls: int | None = None
    turn_timeout: float | None = None
    memory: str | None = None
    """The approved memory as ``memory/MEMORIES.md`` holds it, shown with the history; None: none."""
    propose_memory: ProposeMemory | None = None
    """Where ``remember`` proposals go; None: the turn gets no ``remember`` tool."""
    program: ProgramSpec = field(default_factory=ProgramSpec)
    """The program to run: Fleet's built-in one unless an optimized one was approved."""
    kernel: str = ""
    """What the model is told of the session kernel's variables from earlier turns (live, restored or
    gone), shown after the workspace manifest; empty: nothing to tell."""
    kernel_events: list[Payload] = field(default_factory=list)
    """``kernel.*`` events of the kernel this turn runs on, emitted right after ``turn.started``."""
    announced: Announced | None = None
    """The turn's ``turn.started`` as the service already emitted it; None: the engine emits it."""
    after_sandboxes: Callable[[], Mapping[str, str]] | None = None
    """Run once the turn's sandboxes are shut down, before its end is emitted (``fleet run``, which keeps
    no kernel, copies its results back there); returns the files it refused, each with the warning
    emitted for it, and those are left out of the turn's artifacts."""


def turn_limits(
    settings: Settings,
    *,
    max_iterations: int | None = None,
    max_model_calls: int | None = None,
    turn_timeout: float | None = None,
) -> TurnLimits:
    """The budget a turn runs under: what it asked for, else the settings'."""
    budget = settings.budget
    return TurnLimits(
        max_iterations=max_iterations or budget.max_iterations,
        max_model_calls=max_model_calls or budget.max_model_calls,
        turn_timeout=turn_timeout or budget.turn_timeout,
        execution_timeout=budget.execution_timeout,
    )


def turn_started(
    backend: SandboxBackend, *, task: str, context_paths: list[str], mode: str, limits: TurnLimits
) -> TurnStarted:
    """The data of a turn's first event."""
    return TurnStarted(
        schema=SCHEMA_VERSION,
        task=task,
        context_paths=context_paths,
        mode=mode,
        sandbox=SandboxInfo(backend=backend.name, isolated=backend.isolated),
        budget=limits,
    )


@dataclass
class TurnOutcome:
    status: TurnStatus
    """A final status: completed, incomplete, failed or cancelled (the service adds interrupted)."""
    answer: str | None = None
    error: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    route: Route | None = None
    """The route that ran (direct, flex, rlm); None when the turn ended before one was chosen."""
    answer_source: AnswerSource | None = None
    unverified_reason: str | None = None
    """Set when the answer was not checked by running code (it was extracted): why."""
    evidence: list[str] = field(default_factory=list)
    """Lines printed by the loop's own code that ran without error that support the answer (rlm answers)."""

    @property
    def unverified(self) -> bool:
        return self.unverified_reason is not None

    def terminal_payload(self) -> Payload:
        """The data of the event that ends a turn with this outcome."""
        return terminal_payload(
            self.status,
            answer=self.answer,
            answer_source=self.answer_source,
            unverified=self.unverified,
            unverified_reason=self.unverified_reason,
            reason=self.error,
            usage=self.usage,
            artifacts=self.artifacts,
            evidence=self.evidence,
        )


class Turn:
    def __init__(
        self, settings: Settings, request: TurnRequest, sinks: tuple[EventSink, ...], backend: SandboxBackend
    ) -> None:
        self.settings = settings
        self.request = request
        self.turn_id = request.turn_id
        self.backend = backend
        announced = request.announced
        self.emitter = (
            EventEmitter(request.turn_id, *sinks, start_seq=announced.seq, root_span=announced.span_id)
            if announced is not None
            else EventEmitter(request.turn_id, *sinks)
        )
        self.workspace = Workspace.create(request.workspace, mode=SHARED_DIR_MODE)
        self.tree = self.workspace.tree
        budget = settings.budget
        self.limits = turn_limits(
            settings,
            max_iterations=request.max_iterations,
            max_model_calls=request.max_model_calls,
            turn_timeout=request.turn_timeout,
        )
        self.max_iterations = self.limits.max_iterations
        self.turn_timeout = self.limits.turn_timeout
        self.mode: str = request.mode or settings.mode
        self.route: Route | None = None
        self.budget = TurnBudget(
            max_model_calls=self.limits.max_model_calls,
            deadline=time.monotonic() + self.turn_timeout,
            max_tokens=budget.max_tokens_per_turn,
            max_cost=budget.max_cost_per_turn,
            prices=dict(budget.model_prices),
            max_children=budget.max_children_per_turn,
            max_sandbox_restarts=budget.max_sandbox_restarts,
        )
        self.trace = TurnTrace(self.emitter, self.max_iterations, guard=LoopGuard.from_settings(budget))
        self._sandboxes: list[Sandbox] = []
        """The input files (under ``files/``) of the manifest the model was shown."""
        self._stop = threading.Event()
        self._program_done = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._artifacts_before = snapshot(self.tree)
        self._announced: dict[str, tuple[int, int]] = {}
        self._started = time.monotonic()
        self._scratch_root = settings.data_dir / "children" / self.turn_id

    # -- control -------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop the turn: refuse further model calls, kill running code, end with turn.cancelled."""
        self.budget.cancelled = True
        self._stop.set()
        self._kill_sandboxes()
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)

    def _kill_sandboxes(self) -> None:
        for sandbox in list(self._sandboxes):
            sandbox.interrupt()

    # -- running -------------------------------------------------------------------------------

    async def run(self) -> TurnOutcome:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        if self._stop.is_set():
            self._stopped.set()
        if self.request.announced is None:
            request = self.request
            self.emitter.emit(
                turn_started(
                    self.backend,
                    task=request.task,
                    context_paths=request.context_paths,
                    mode=self.mode,
                    limits=self.limits,
                )
            )
        for payload in self.request.kernel_events:
            self.emitter.emit(payload)
        if not self.backend.isolated:
            self.emitter.emit(
                TurnWarning(
                    message="the sandbox is NOT isolated (sandbox_allow_unisolated is on): code runs with host access"
                )
            )
        done: asyncio.Future[TurnOutcome] = self._loop.create_future()
        worker = threading.Thread(target=self._work, args=(done,), name=f"turn-{self.turn_id}", daemon=True)
        worker.start()
        stopped: asyncio.Future[Any] = asyncio.ensure_future(self._stopped.wait())
        waiting: set[asyncio.Future[Any]] = {done, stopped}
        try:
            finished, _ = await asyncio.wait(
                waiting, timeout=max(0.0, self.budget.remaining_seconds()), return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            self.cancel()
            self._finish(TurnOutcome(status=TurnStatus.CANCELLED, error="the turn was cancelled"))
            raise
        finally:
            stopped.cancel()
        if done in finished:
            outcome = done.result()
        elif stopped in finished:
            outcome = TurnOutcome(status=TurnStatus.CANCELLED, error="the turn was cancelled")
        else:
            self.budget.cancelled = True
            self._kill_sandboxes()
            self.emitter.emit(BudgetExhausted(budget="deadline", limit=self.turn_timeout))
            outcome = TurnOutcome(status=TurnStatus.FAILED, error=f"turn deadline of {self.turn_timeout:g}s exceeded")
        return self._finish(outcome)

    def _work(self, done: asyncio.Future[TurnOutcome]) -> None:
        try:
            outcome = self._run_program()
        except BaseException as exc:  # every failure becomes a one-line reason
            outcome = self._failure(exc)
        self._program_done = True
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the turn already ended and its loop is closed
            self._loop.call_soon_threadsafe(_resolve, done, outcome)

    def _run_program(self) -> TurnOutcome:
        settings = self.settings
        skills = TurnSkills.found()
        skills.install(self.workspace, self.trace, report_catalog=True)
        root_lm = MeteredLM(build_lm(settings.lm), self.budget, "root", streaming=settings.lm.stream)
        task = self._task_text()
        adapter = turn_adapter(settings.lm, root_lm, task, self.trace.guard)
        self.trace.hints.json_replies = isinstance(adapter, SchemaAdapter)
        ctx = RouteContext(
            settings=settings,
            budget=self.budget,
            trace=self.trace,
            root_lm=root_lm,
            adapter=adapter,
            sub_lm=MeteredLM(build_lm(settings.sub_lm.over(settings.lm)), self.budget, "sub", streaming=False),
            max_iterations=self.max_iterations,
            inputs={
                "task": Text(task),
                "workspace": Text(self._workspace_text()),
                "history": Text(
                    render_context([(h.message, h.answer) for h in self.request.history], self.request.memory)
                ),
            },
            interpreter_factory=self._sandbox_factory(),
            tools=self._delegation(skills).tools(depth=0, parent=self.trace, workspace=self.workspace)
            + self._memory_tools(),
            has_files=bool(self.request.context_paths) or any(self.workspace.files_dir.iterdir()),
            skills=skills.listing,
            program=self.request.program,
        )
        self.trace.warn_skipped(self.tree)
        try:
            choice = select_route(ctx, self.mode)
        except RouteRefused as exc:
            return TurnOutcome(status=TurnStatus.FAILED, error=str(exc))
        self.route = choice.route
        answer = run_route(ctx, choice)
        self.budget.check_alive()
        if self.trace.extracted:
            evidence = pick_evidence(self.trace.printed.executions(), answer)
            return TurnOutcome(
                TurnStatus.COMPLETED,
                answer,
                answer_source="extracted",
                unverified_reason=extracted_unverified_reason(evidence, self.trace.early_end),
                evidence=evidence.lines,
            )
        source = ROUTE_ANSWER_SOURCE.get(choice.route, "submitted")
        if source == "module":
            return TurnOutcome(
                TurnStatus.COMPLETED, answer, answer_source=source, unverified_reason=MODULE_UNVERIFIED_REASON
            )
        if source == "direct":
            reason = direct_unverified_reason(answer, str(ctx.inputs["task"]), str(ctx.inputs["history"]))
            return TurnOutcome(TurnStatus.COMPLETED, answer, answer_source=source, unverified_reason=reason)
        evidence = pick_evidence(self.trace.printed.executions(), answer)
        return TurnOutcome(
            TurnStatus.COMPLETED,
            answer,
            answer_source=source,
            unverified_reason=unread_inputs_reason(self.request.task, self.trace.hints.inputs, self.trace.codes),
            evidence=evidence.lines,
        )

    def _delegation(self, skills: TurnSkills) -> Delegation:
        return Delegation(
            settings=self.settings,
            budget=self.budget,
            emitter=self.emitter,
            backend=self.backend,
            turn_id=self.turn_id,
            lm=build_lm(self.settings.lm),
            sub_lm=build_lm(self.settings.sub_lm.over(self.settings.lm)),
            register_sandbox=self._register_sandbox,
            scratch_root=self._scratch_root,
            skills=skills,
        )

    def _memory_tools(self) -> list[Callable[..., Any]]:
        if self.request.propose_memory is None:
            return []
        return memory_tools(self.request.propose_memory, self.settings.memory, self.trace)

    def _register_sandbox(self, sandbox: Sandbox) -> None:
        self._sandboxes.append(sandbox)
        if self._stop.is_set():
            sandbox.interrupt()

    def _sandbox_factory(self) -> SandboxFactory:
        spec = SandboxSpec(
            workspace=self.workspace.root,
            limits=SandboxLimits.from_settings(self.settings.sandbox, self.settings.budget),
            labels={"turn": self.turn_id},
            observer=TurnObserver(self.trace),
        )
        return observed_sandboxes(
            self.backend,
            spec,
            self.trace,
            self.settings,
            budget=self.budget,
            on_create=self._register_sandbox,
            after_execute=self._announce_artifacts,
        )

    def _workspace_text(self) -> str:
        manifest = self.trace.shown_inputs(build_manifest(self.tree), self.request.task)
        return f"{manifest}\n\n{self.request.kernel}" if self.request.kernel else manifest

    def _task_text(self) -> str:
        task = self.request.task
        if self.request.context_paths:
            task += "\n\nFocus on these workspace files: " + ", ".join(self.request.context_paths)
        return task

    # -- results -------------------------------------------------------------------------------

    def _announce_artifacts(self, refused: Collection[str] = ()) -> frozenset[str]:
        """Emit ``artifact.created`` for each new or changed artifact the host would copy out: a sparse one,
        one past the turn's bound, or one ``refused`` by a copy already made is never announced. Returns
        the files changed since the turn began, each with its size (what the loop guard compares)."""
        current = snapshot(self.tree)
        self.trace.warn_skipped(self.tree, in_iteration=True)
        changed: set[str] = set()
        for path in changed_between(self._artifacts_before, current):
            facts = current.get(path)
            if facts is not None:
                changed.add(f"{path} ({facts[0]} bytes)")
            if facts is None or self._announced.get(path) == facts or path in refused:
                continue
            if not copyable(self.tree, path, self._copy_out_limit):
                continue
            self._announced[path] = facts
            self.trace.emit_in_iteration(ArtifactCreated(path=path, size=facts[0]))
        return frozenset(changed)

    @property
    def _copy_out_limit(self) -> int:
        return self.settings.sandbox.copy_out_turn_mb * MIB

    def _failure(self, exc: BaseException) -> TurnOutcome:
        if isinstance(exc, TurnCancelled) or self.budget.cancelled:
            return TurnOutcome(status=TurnStatus.CANCELLED, error="the turn was cancelled")
        incomplete = incomplete_in(exc)
        if incomplete is not None:
            reason = str(incomplete)
            return TurnOutcome(status=TurnStatus.INCOMPLETE, answer=could_not_compute(reason), error=reason)
        if isinstance(exc, BudgetExceeded):
            self.emitter.emit(BudgetExhausted(budget=exc.kind, limit=exc.limit))
            return TurnOutcome(status=TurnStatus.FAILED, error=str(exc))
        cause = budget_error_in(exc)
        if cause is not None and cause is not exc:
            return self._failure(cause)
        if isinstance(exc, CodeInterpreterError):
            return TurnOutcome(status=TurnStatus.FAILED, error=f"sandbox failed: {one_line(exc, with_type=False)}")
        if isinstance(exc, dspy.LMError):
            return TurnOutcome(
                status=TurnStatus.FAILED, error=f"model endpoint error: {one_line(exc, with_type=False)}"
            )
        return TurnOutcome(status=TurnStatus.FAILED, error=one_line(exc))

    def _finish(self, outcome: TurnOutcome) -> TurnOutcome:
        if not self._program_done:  # else every sandbox was shut down, a session's kernel kept
            self._kill_sandboxes()
        remove_volume_directory(self._scratch_root)
        refused = self.request.after_sandboxes() if self.request.after_sandboxes is not None else {}
        for message in refused.values():
            self.emitter.emit(TurnWarning(message=message))
        if outcome.status is TurnStatus.COMPLETED:
            self._announce_artifacts(refused)
        outcome.artifacts = [a for a in self._artifact_records() if a["path"] not in refused]
        outcome.route = self.route
        outcome.usage = self._usage()
        self.emitter.emit(outcome.terminal_payload())
        return outcome

    def _artifact_records(self) -> list[dict[str, Any]]:
        records = []
        for path in sorted(self._announced):
            found = stat_file(self.tree, path)
            if found is None:  # gone, or replaced by a link or a special file since it was announced
                continue
            try:
                sha256 = hash_copied_out(found, self._copy_out_limit)
            except OSError:  # OverBound (made sparse or grown since it was announced), or replaced
                continue
            records.append(ArtifactRecord(path=path, size=found.size, sha256=sha256).model_dump())
        return records

    def _usage(self) -> dict[str, Any]:
        calls = dict(self.budget.calls)
        return Usage(
            route=self.route,
            model_calls=sum(calls.values()),
            root_calls=calls.get("root", 0),
            sub_calls=calls.get("sub", 0),
            child_calls=sum(n for role, n in calls.items() if role.startswith("child")),
            children=self.budget.children_started,
            input_tokens=self.budget.usage.input_tokens,
            output_tokens=self.budget.usage.output_tokens,
            iterations=self.trace.iteration,
            sandbox_errors=self.trace.sandbox_errors,
            duration=round(time.monotonic() - self._started, 3),
        ).model_dump()


def _resolve(future: asyncio.Future[TurnOutcome], outcome: TurnOutcome) -> None:
    if not future.done():
        future.set_result(outcome)


def build_turn(
    settings: Settings, request: TurnRequest, *sinks: EventSink, backend: SandboxBackend | None = None
) -> Turn:
    """Prepare a turn; nothing runs until ``await turn.run()``."""
    return Turn(settings, request, sinks, backend or configured_backend(settings))
