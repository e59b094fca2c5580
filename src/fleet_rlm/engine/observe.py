"""Turning what DSPy and the sandbox do into the turn's events.

``RLMCallbacks`` watches ``dspy.RLM``'s predictors (each action call is an iteration);
``TurnObserver`` receives sandbox output and tool calls; ``ObservedSandbox`` wraps each sandbox
to count code errors, announce artifacts as soon as an execution writes them and replace the
sandbox when its worker crashes (:mod:`fleet_rlm.engine.restart`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from dspy.primitives import CodeExecutionError
from dspy.utils import BaseCallback

from fleet_rlm.config import Settings
from fleet_rlm.engine.bridge import BridgeGuard
from fleet_rlm.engine.budget import TurnBudget
from fleet_rlm.engine.dspy_compat import strip_code_fences
from fleet_rlm.engine.emitter import EventEmitter
from fleet_rlm.engine.evidence import PrintedOutputs
from fleet_rlm.engine.hints import FailureHints
from fleet_rlm.engine.honesty import LoopGuard, holds_no_code
from fleet_rlm.engine.program import SHOW_WRITTEN_FILES, LoopRecovery
from fleet_rlm.engine.restart import SandboxRestarter, restart_observation
from fleet_rlm.protocol.events import new_id
from fleet_rlm.protocol.payloads import (
    BudgetExhausted,
    Code,
    ExecutionFailed,
    IterationStarted,
    Output,
    OutputStream,
    Payload,
    Reasoning,
    ToolFinished,
    ToolStarted,
    TurnWarning,
)
from fleet_rlm.sandbox.base import (
    CodeFailed,
    CodeSyntaxError,
    Sandbox,
    SandboxBackend,
    SandboxCrashed,
    SandboxFactory,
    SandboxSpec,
)
from fleet_rlm.sandbox.wrapper import WrapperSandbox
from fleet_rlm.workspace.manifest import ManifestEntry
from fleet_rlm.workspace.reading import example_read, input_paths, input_tables, model_manifest
from fleet_rlm.workspace.tree import SafeTree

PREVIEW_CHARS = 200
MAX_TRACEBACK_LINES = 30
MAX_TRACEBACK_CHARS = 4000


class TurnTrace:
    """Mutable state of one running RLM loop that its events need: the current span and counters.

    The turn's own loop hangs off the turn's root span; a child agent's loop gets a trace whose
    ``root_span`` is the child's span (and ``parent_span`` the iteration that spawned it), so every
    event of a child lands in its own subtree.
    """

    def __init__(
        self,
        emitter: EventEmitter,
        max_iterations: int,
        *,
        root_span: str | None = None,
        parent_span: str | None = None,
        guard: LoopGuard | None = None,
    ) -> None:
        self.emitter = emitter
        self.guard = guard or LoopGuard(warn_after=2, stop_after=4)
        self.hints = FailureHints()
        """What the loop's failed executions are told on top of their error (set with the workspace's inputs)."""
        self.extracted = False
        """True once the answer came from the extract step (the iteration budget ran out, or the loop was
        ended early)."""
        self.early_end: str | None = None
        """Why the loop was ended through the extract step before its iteration budget ran out, if it was."""
        self.max_iterations = max_iterations
        self.root_span = root_span or emitter.root_span
        self.parent_span = parent_span
        self.iteration = 0
        self.iteration_span = self.root_span
        self.sandbox_errors = 0
        self.printed = PrintedOutputs()
        """What this loop's own code printed in executions that ran without error: evidence for its answer."""
        self.codes: list[str] = []
        """The code of each of this loop's own executions, failed ones too (a file read before an error
        may be used later); what the turn checks its answer's use of the inputs against."""
        self.lock = threading.Lock()
        self._skipped_told: set[str] = set()

    def shown_inputs(self, entries: Sequence[ManifestEntry], task: str) -> str:
        """The manifest of ``entries`` as the loop's model sees it (:func:`model_manifest`), after telling the
        guard and the hints what the loop's inputs are: the example read for ``task``, the input files and
        their tables' columns."""
        read = example_read(entries, task)
        self.guard.reading = self.hints.reading = read
        self.hints.inputs, self.hints.tables = input_paths(entries), input_tables(entries)
        return model_manifest(entries, read)

    def emit(self, payload: Payload) -> None:
        """An event about this loop as a whole (its root span)."""
        if self.root_span == self.emitter.root_span:
            self.emitter.emit(payload)
        else:
            self.emitter.emit(payload, span_id=self.root_span, parent_span_id=self.parent_span)

    def emit_in_iteration(self, payload: Payload, *, span_id: str | None = None) -> None:
        if span_id is None:
            self.emitter.emit(payload, span_id=self.iteration_span, parent_span_id=self.root_span)
        else:
            self.emitter.emit(payload, span_id=span_id, parent_span_id=self.iteration_span)

    def ran_without_error(self, own_code: bool) -> None:
        """An execution ran without error: what the loop's own code printed in it counts as evidence."""
        if own_code:
            self.printed.succeeded(self.iteration)

    def mark_extracted(self) -> None:
        """The extract step is about to answer from the work so far: say so, the answer is unverified."""
        self.extracted = True
        why = self.early_end or f"iteration budget of {self.max_iterations} reached"
        self.emit(
            TurnWarning(
                message=f"{why}: the answer is extracted from the work so far and was not checked by running "
                "code (unverified)"
            )
        )

    def end_early(self, reason: str) -> None:
        """The loop ends through the extract step before its budget ran out; ``reason`` says why."""
        self.early_end = reason

    def warn(self, message: str) -> None:
        """A warning about the current iteration."""
        self.emit_in_iteration(TurnWarning(message=message))

    def recovery(self) -> LoopRecovery:
        """How this loop goes on after a reply it cannot read, or ends early on repeated work."""
        return LoopRecovery(self.guard, self.warn, self.end_early)

    def warn_skipped(self, tree: SafeTree, *, in_iteration: bool = False) -> None:
        """A warning for each link or special file the host met in ``tree`` and left alone (once each)."""
        for item in tree.take_skipped():
            if item.rel in self._skipped_told:
                continue
            self._skipped_told.add(item.rel)
            message = f"{item.rel} is {item.what}: skipped (the host never follows links or opens special files)"
            if in_iteration:
                self.emit_in_iteration(TurnWarning(message=message))
            else:
                self.emit(TurnWarning(message=message))


class RLMCallbacks(BaseCallback):  # type: ignore[misc]
    """Emits iteration.started / reasoning / code around each action call of one ``dspy.RLM``."""

    def __init__(self, trace: TurnTrace, action: Any, extract: Any) -> None:
        self.trace = trace
        self.action = action
        self.extract = extract
        self._action_calls: set[str] = set()

    def on_module_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        trace = self.trace
        if instance is self.action:
            self._action_calls.add(call_id)
            with trace.lock:
                trace.iteration += 1
                trace.iteration_span = new_id("span")
            trace.emitter.emit(
                IterationStarted(iteration=trace.iteration, max_iterations=trace.max_iterations),
                span_id=trace.iteration_span,
                parent_span_id=trace.root_span,
            )
        elif instance is self.extract and trace.early_end is None:
            trace.emit(BudgetExhausted(budget="iterations", limit=trace.max_iterations, used=trace.iteration))

    def on_module_end(self, call_id: str, outputs: Any | None, exception: Exception | None = None) -> None:
        if call_id not in self._action_calls or outputs is None:
            return
        self._action_calls.discard(call_id)
        reasoning = getattr(outputs, "reasoning", None)
        code = getattr(outputs, "code", None)
        if reasoning:
            self.trace.emit_in_iteration(Reasoning(text=str(reasoning)))
        if code is not None:
            self.trace.emit_in_iteration(Code(code=_runnable(str(code))))


class TurnObserver:
    """The sandbox observer of a turn: output chunks and tool calls become events."""

    def __init__(self, trace: TurnTrace) -> None:
        self.trace = trace

    def output(self, stream: OutputStream, text: str) -> None:
        if stream == "stdout":
            self.trace.printed.printed(self.trace.iteration, text)
        self.trace.emit_in_iteration(Output(stream=stream, text=text))

    def tool_started(self, call_id: str, name: str, arguments: str) -> None:
        self.trace.emit_in_iteration(
            ToolStarted(call_id=call_id, name=name, arguments=arguments[:PREVIEW_CHARS]), span_id=f"span_{call_id}"
        )

    def tool_finished(self, call_id: str, name: str, duration: float, error: str | None) -> None:
        self.trace.emit_in_iteration(
            ToolFinished(call_id=call_id, name=name, duration=round(duration, 4), error=error),
            span_id=f"span_{call_id}",
        )

    def warning(self, message: str) -> None:
        self.trace.warn(message)


class ObservedSandbox(WrapperSandbox):
    """A sandbox as the turn uses it; DSPy sees the same ``CodeInterpreter`` surface.

    ``tools`` is what DSPy and Fleet register; the sandbox itself only ever gets the checked
    tools ``guard`` makes of them, at each execution. When the worker crashes while the model's
    code runs, ``restarter`` swaps in a fresh sandbox and the execution raises what the model is
    told (a ``CodeExecutionError``), so the loop carries on.
    """

    def __init__(
        self,
        inner: Sandbox,
        trace: TurnTrace,
        after_execute: Callable[[], frozenset[str]],
        guard: BridgeGuard,
        restarter: SandboxRestarter | None = None,
    ) -> None:
        super().__init__(inner)
        self._trace = trace
        self._after_execute = after_execute
        self._guard = guard
        self._restarter = restarter
        self._tools: dict[str, Callable[..., Any]] = {}

    @property
    def tools(self) -> dict[str, Callable[..., Any]]:
        """What DSPy and Fleet register, kept here: the wrapped sandbox gets the checked ones."""
        return self._tools

    @tools.setter
    def tools(self, value: dict[str, Callable[..., Any]]) -> None:
        self._tools = value

    def execute(self, code: str, variables: dict[str, Any] | None = None) -> Any:
        self.wrapped.tools = self._bridged_tools()
        trace = self._trace
        own_code = trace.iteration > 0  # DSPy's setup executions come before the first iteration
        if own_code:
            trace.codes.append(code)
            if holds_no_code(code):
                return trace.guard.no_code()
        if not own_code and self._restarter is not None:
            self._restarter.record_setup(code, variables)
        announced = False
        try:
            result = self.wrapped.execute(code, variables)
        except SandboxCrashed as crash:
            if not own_code or self._restarter is None:
                raise
            with trace.lock:
                trace.sandbox_errors += 1
            self.wrapped = self._restarter.replace(self.wrapped, crash, self._bridged_tools)
            raise CodeExecutionError(restart_observation(crash)) from crash
        except (CodeExecutionError, SyntaxError) as exc:
            with trace.lock:
                trace.sandbox_errors += 1
            failure = describe_failure(exc)
            trace.emit_in_iteration(failure)
            if own_code:
                hint = trace.hints.hint(code, failure.error_type, failure.message)
                advice = trace.guard.advice(trace.guard.failure(code, failure.error_type, failure.message))
                told = "\n\n".join(text for text in (hint, advice) if text)
                if told:
                    raise CodeExecutionError(f"{exc}\n\n{told}") from exc
            raise
        else:
            trace.ran_without_error(own_code)
            if own_code:
                files, announced = self._after_execute(), True
                if code == SHOW_WRITTEN_FILES:  # Fleet's own code, run after the loop ended: not the model's work
                    return result
                output = "" if result is None else result if isinstance(result, str) else repr(result)
                advice = trace.guard.repeat_advice(trace.guard.success(code, output, files), code)
                if advice is not None and (result is None or isinstance(result, str)):
                    return f"{result}\n\n{advice}" if result else advice
            return result
        finally:
            if not announced:
                self._after_execute()

    def _bridged_tools(self) -> dict[str, Callable[..., Any]]:
        return self._guard.bridge(self.tools)


def observed_sandboxes(
    backend: SandboxBackend,
    spec: SandboxSpec,
    trace: TurnTrace,
    settings: Settings,
    *,
    budget: TurnBudget,
    on_create: Callable[[Sandbox], None],
    after_execute: Callable[[], frozenset[str]] = frozenset,
) -> SandboxFactory:
    """The sandbox factory of one RLM loop (a turn's or a child agent's): ``budget`` may refuse a
    sandbox (a cancelled or timed-out turn) and bounds restarts after crashes, ``on_create``
    registers each sandbox (a restarted one too) for cancel, and each is observed by ``trace`` with
    its tool calls checked by a guard of its own."""

    def observed(sandbox: Sandbox) -> Sandbox:
        restarter = SandboxRestarter(
            factory.make, budget.reserve_restart, budget.max_sandbox_restarts, trace.emit_in_iteration
        )
        return ObservedSandbox(sandbox, trace, after_execute, BridgeGuard.for_settings(settings), restarter)

    factory = SandboxFactory(backend, spec, admit=budget.check_alive, on_create=on_create, wrap=observed)
    return factory


def describe_failure(exc: BaseException) -> ExecutionFailed:
    """The ``execution.failed`` event's data: what failed, where, and the traceback the model saw."""
    if isinstance(exc, CodeFailed):
        return ExecutionFailed(
            error_type=exc.error_type, message=exc.message, line=exc.line, traceback=_trimmed(exc.traceback)
        )
    if isinstance(exc, SyntaxError):
        line = exc.line if isinstance(exc, CodeSyntaxError) else exc.lineno
        return ExecutionFailed(error_type="SyntaxError", message=exc.msg or str(exc), line=line, traceback="")
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return ExecutionFailed(error_type=type(exc).__name__, message=lines[-1] if lines else "", line=None, traceback="")


def _trimmed(text: str) -> str:
    lines = text.splitlines()
    if len(lines) > MAX_TRACEBACK_LINES:
        lines = [lines[0], f"  [... {len(lines) - MAX_TRACEBACK_LINES} lines ...]", *lines[-MAX_TRACEBACK_LINES + 1 :]]
    text = "\n".join(lines)
    return text if len(text) <= MAX_TRACEBACK_CHARS else "..." + text[-MAX_TRACEBACK_CHARS:]


def _runnable(code: str) -> str:
    """The code as the sandbox will run it: DSPy's own fence stripping, else the text as written."""
    try:
        return str(strip_code_fences(code))
    except SyntaxError:
        return code
