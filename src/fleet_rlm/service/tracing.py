"""Each turn as one span tree, built from its events (the optional extra ``fleet-rlm[tracing]``).

The engine knows nothing of tracing: a :class:`TurnTracer` subscribes to a turn's channel and turns the
typed event stream into OpenTelemetry spans, after the fact, with the events' own timestamps. The events'
spans (turn > iteration > tool call, child > ...) become spans; inside each iteration the model's reply
(from the iteration's start until its reasoning or code is complete) and the code's execution (from then
until the iteration ends) get spans of their own. Names and attributes follow the OpenTelemetry GenAI
semantic conventions where one applies (``invoke_agent``, ``chat``, ``execute_tool``, ``gen_ai.*``), and
``fleet.*`` elsewhere. Content (the task, the reasoning, the code, the answer) is never put in a span.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from fleet_rlm.config import Settings
from fleet_rlm.protocol.events import Event
from fleet_rlm.protocol.payloads import (
    ArtifactCreated,
    BudgetExhausted,
    ChildFinished,
    ChildStarted,
    Code,
    ExecutionFailed,
    IterationStarted,
    KernelEvicted,
    KernelRestored,
    KernelStarted,
    Payload,
    Reasoning,
    RouteSelected,
    SandboxRestarted,
    ToolFinished,
    ToolStarted,
    TurnFailed,
    TurnInterrupted,
    TurnStarted,
    TurnWarning,
    Usage,
)
from fleet_rlm.protocol.status import TurnStatus

log = logging.getLogger(__name__)

AGENT_NAME = "fleet-rlm"
SERVICE_NAME = "fleet-rlm"
SCOPE = "fleet_rlm"
SpanKindName = Literal["turn", "route", "iteration", "chat", "code", "tool", "child", "other"]


def _ns(ts: float) -> int:
    return int(ts * 1e9)


class TraceSpan(Protocol):
    """One span as a tracing backend keeps it."""

    def set_attributes(self, attributes: dict[str, Any]) -> None: ...
    def usage(self, input_tokens: int, output_tokens: int, *, whole_turn: bool) -> None:
        """Tokens used under this span (the whole turn's at the root, children included)."""
        ...

    def fail(self, error_type: str, message: str) -> None: ...
    def mark(self, name: str, attributes: dict[str, Any], ts: float) -> None: ...
    def end(self, ts: float) -> None: ...


class TraceBackend(Protocol):
    """Where a turn's spans go: OpenTelemetry (OTLP), MLflow (``fleet_rlm.service.tracing_mlflow``)."""

    def start(
        self, name: str, kind: SpanKindName, parent: TraceSpan | None, ts: float, attributes: dict[str, Any]
    ) -> TraceSpan:
        """A new span; a root span (no parent) starts a new trace."""
        ...

    def trace_id(self, root: TraceSpan) -> str: ...

    def shutdown(self) -> None: ...


class _OtelSpan:
    def __init__(self, span: Span) -> None:
        self.span = span

    def set_attributes(self, attributes: dict[str, Any]) -> None:
        self.span.set_attributes(attributes)

    def usage(self, input_tokens: int, output_tokens: int, *, whole_turn: bool) -> None:
        self.span.set_attributes(
            {"gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens}
        )

    def fail(self, error_type: str, message: str) -> None:
        self.span.set_attribute("error.type", error_type)
        self.span.set_status(Status(StatusCode.ERROR, message[:200]))

    def mark(self, name: str, attributes: dict[str, Any], ts: float) -> None:
        self.span.add_event(name, attributes=attributes, timestamp=_ns(ts))

    def end(self, ts: float) -> None:
        self.span.end(end_time=_ns(ts))


class OtelBackend:
    """Spans to the span processors of an OpenTelemetry SDK ``provider`` (an OTLP exporter, or a test's)."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer(SCOPE)

    def start(
        self, name: str, kind: SpanKindName, parent: TraceSpan | None, ts: float, attributes: dict[str, Any]
    ) -> TraceSpan:
        context = trace.set_span_in_context(parent.span) if isinstance(parent, _OtelSpan) else Context()
        span = self._tracer.start_span(
            name, context=context, kind=SpanKind.INTERNAL, start_time=_ns(ts), attributes=attributes
        )
        return _OtelSpan(span)

    def trace_id(self, root: TraceSpan) -> str:
        assert isinstance(root, _OtelSpan)
        return format(root.span.get_span_context().trace_id, "032x")

    def shutdown(self) -> None:
        self.provider.shutdown()


@dataclass
class _Open:
    span: TraceSpan
    parent: str | None
    started: float
    kind: SpanKindName
    model_call_done: bool = False
    execution: TraceSpan | None = None


@dataclass
class _TurnSpans:
    """The open spans of one turn, by the event stream's span ids."""

    backend: TraceBackend
    model: str | None
    session_id: str
    open: dict[str, _Open] = field(default_factory=dict)
    root: str | None = None
    trace_id: str | None = None
    ended: bool = False

    def observe(self, event: Event) -> None:
        if self.ended:
            return
        payload = event.payload
        if isinstance(payload, TurnStarted):
            self._start_root(event, payload)
            return
        if self.root is None:
            return
        if event.span_id not in self.open and event.span_id != self.root:
            self._open_span(event, payload)
        match payload:
            case KernelEvicted() | KernelStarted() | KernelRestored():
                self._sandbox_ready(event)
            case RouteSelected():
                self._route(event, payload)
            case Reasoning():
                self._model_reply(event)
            case Code(code=code):
                self._code(event, code)
            case ExecutionFailed(error_type=error_type, message=message):
                self._execution_failed(event, error_type, message)
            case ToolFinished(error=error):
                self._tool_finished(event, error)
            case ChildFinished():
                self._child_finished(event, payload)
            case SandboxRestarted() | ArtifactCreated() | BudgetExhausted() | TurnWarning():
                self._mark(event, payload)
        if event.terminal:
            self._end_turn(event, payload)

    # Opening ----------------------------------------------------------------------------------

    def _start_root(self, event: Event, payload: TurnStarted) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
            "gen_ai.conversation.id": self.session_id,
            "fleet.turn.id": event.turn_id,
            "fleet.mode": payload.mode,
            "fleet.sandbox.backend": payload.sandbox.backend,
        }
        if self.model:
            attributes["gen_ai.request.model"] = self.model
        span = self.backend.start(f"invoke_agent {AGENT_NAME}", "turn", None, event.ts, attributes)
        self.root = event.span_id
        self.open[event.span_id] = _Open(span, None, event.ts, "turn")
        self.trace_id = self.backend.trace_id(span)

    def _open_span(self, event: Event, payload: Payload) -> None:
        parent_id = event.parent_span_id if event.parent_span_id in self.open else self.root
        assert parent_id is not None
        parent = self.open[parent_id]
        if isinstance(payload, IterationStarted):
            for sibling_id in [k for k, o in self.open.items() if o.parent == parent_id and o.kind == "iteration"]:
                self._end(sibling_id, event.ts)
        name, kind, attributes = _describe(event, payload)
        span = self.backend.start(name, kind, parent.span, event.ts, attributes)
        self.open[event.span_id] = _Open(span, parent_id, event.ts, kind)

    def _child_span(
        self, parent: _Open, name: str, kind: SpanKindName, ts: float, attributes: dict[str, Any]
    ) -> TraceSpan:
        return self.backend.start(name, kind, parent.span, ts, attributes)

    # What happens inside a span ---------------------------------------------------------------

    def _sandbox_ready(self, event: Event) -> None:
        """The engine's first events (its kernel's) come once the turn's sandbox is ready; routing starts
        there, not at ``turn.started`` (sent before the sandbox was taken)."""
        if self.root is not None:
            self.open[self.root].started = event.ts

    def _route(self, event: Event, payload: RouteSelected) -> None:
        assert self.root is not None
        root = self.open[self.root]
        root.span.set_attributes({"fleet.route": payload.route})
        span = self._child_span(
            root,
            f"route {payload.route}",
            "route",
            root.started,
            {"fleet.route": payload.route, "fleet.route.reason": payload.reason},
        )
        span.end(event.ts)
        root.started = event.ts  # a reply at the root (direct, flex) is asked for once the route is chosen

    def _model_reply(self, event: Event) -> None:
        """The model's reply in this span ends when its reasoning or code is complete; the code then runs."""
        owner = self.open.get(event.span_id)
        if owner is None or owner.model_call_done:
            return
        attributes: dict[str, Any] = {"gen_ai.operation.name": "chat"}
        if self.model:
            attributes["gen_ai.request.model"] = self.model
        call = self._child_span(owner, f"chat {self.model or 'model'}", "chat", owner.started, attributes)
        call.end(event.ts)
        owner.model_call_done = True

    def _code(self, event: Event, code: str) -> None:
        self._model_reply(event)
        owner = self.open.get(event.span_id)
        if owner is not None and owner.execution is None:
            owner.execution = self._child_span(owner, "execute_code", "code", event.ts, {"fleet.code.chars": len(code)})

    def _execution_failed(self, event: Event, error_type: str, message: str) -> None:
        owner = self.open.get(event.span_id)
        if owner is None:
            return
        (owner.execution or owner.span).fail(error_type, message)

    def _tool_finished(self, event: Event, error: str | None) -> None:
        opened = self.open.get(event.span_id)
        if opened is None:
            return
        if error:
            opened.span.fail("tool_error", error)
        self._end(event.span_id, event.ts)

    def _child_finished(self, event: Event, payload: ChildFinished) -> None:
        opened = self.open.get(event.span_id)
        if opened is None:
            return
        usage = payload.usage
        opened.span.set_attributes(
            {
                "fleet.child.outcome": payload.outcome,
                "fleet.iterations": usage.iterations,
                "fleet.model_calls": usage.model_calls,
            }
        )
        opened.span.usage(usage.input_tokens, usage.output_tokens, whole_turn=False)
        if payload.outcome != "completed":
            opened.span.fail(payload.outcome, payload.error or payload.outcome)
        self._end(event.span_id, event.ts)

    def _mark(self, event: Event, payload: Payload) -> None:
        """Events that happen at one moment become span events on the span they name."""
        opened = self.open.get(event.span_id)
        if opened is None:
            return
        attributes = {
            f"fleet.{k}": v
            for k, v in payload.to_data().items()
            if isinstance(v, (str, int, float, bool)) and k != "text"
        }
        opened.span.mark(event.type.value, attributes, event.ts)

    # Closing ----------------------------------------------------------------------------------

    def _end(self, span_id: str, ts: float) -> None:
        for inner in [k for k, o in self.open.items() if o.parent == span_id]:
            self._end(inner, ts)
        opened = self.open.pop(span_id, None)
        if opened is None:
            return
        if opened.execution is not None:
            opened.execution.end(ts)
        opened.span.end(ts)

    def _end_turn(self, event: Event, payload: Payload) -> None:
        assert self.root is not None
        root = self.open[self.root].span
        status = TurnStatus(event.type.value.removeprefix("turn."))
        root.set_attributes({"fleet.status": status.value})
        usage = getattr(payload, "usage", None)
        if isinstance(usage, Usage):
            root.usage(usage.input_tokens, usage.output_tokens, whole_turn=True)
            root.set_attributes(
                {
                    "fleet.model_calls": usage.model_calls,
                    "fleet.iterations": usage.iterations,
                    "fleet.children": usage.children,
                }
            )
        if isinstance(payload, TurnFailed | TurnInterrupted):
            root.fail(status.value, payload.reason)
        self._end(self.root, event.ts)
        self.ended = True


def _describe(event: Event, payload: Payload) -> tuple[str, SpanKindName, dict[str, Any]]:
    """The name, kind and attributes of the span an event opens."""
    match payload:
        case IterationStarted(iteration=iteration):
            return f"iteration {iteration}", "iteration", {"fleet.iteration": iteration}
        case ToolStarted(name=name, call_id=call_id):
            return (
                f"execute_tool {name}",
                "tool",
                {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id},
            )
        case ChildStarted(child_id=child_id, depth=depth):
            return (
                f"invoke_agent {AGENT_NAME} child",
                "child",
                {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": f"{AGENT_NAME} child",
                    "gen_ai.agent.id": child_id,
                    "fleet.child.depth": depth,
                },
            )
    return event.type.value, "other", {}


class TurnTracer:
    """Every turn's span tree, to each backend (OpenTelemetry, MLflow).

    Each backend builds its spans on a thread of its own, in event order: a backend may do I/O when a
    span starts or ends (MLflow writes to its store), and the event loop that runs turns must not wait
    for it.
    """

    def __init__(self, *backends: TraceBackend, model: str | None = None) -> None:
        self.backends = backends
        self.model = model
        self._workers = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"tracing-{type(backend).__name__}")
            for backend in backends
        ]

    def observers(self, session_id: str, on_trace: Callable[[str], None] | None = None) -> list[TurnObserver]:
        """A new turn's span builders, one per backend: call each with every event of the turn, in order.
        ``on_trace`` is called once (on a tracing thread) with the turn's trace id in the first backend,
        when its trace starts."""
        return [
            TurnObserver(_TurnSpans(backend, self.model, session_id), worker, on_trace if index == 0 else None)
            for index, (backend, worker) in enumerate(zip(self.backends, self._workers, strict=True))
        ]

    def drain(self) -> None:
        """Wait until the spans of every event handed over so far are built."""
        for worker in self._workers:
            worker.submit(lambda: None).result()

    def shutdown(self) -> None:
        """Build what is queued, send what is buffered, and stop."""
        for backend, worker in zip(self.backends, self._workers, strict=True):
            worker.shutdown(wait=True)
            backend.shutdown()


class TurnObserver:
    def __init__(self, spans: _TurnSpans, worker: Executor, on_trace: Callable[[str], None] | None) -> None:
        self._spans = spans
        self._worker = worker
        self._on_trace = on_trace

    def __call__(self, event: Event) -> None:
        try:
            self._worker.submit(self._observe, event)
        except RuntimeError:  # the tracer has shut down (the server is stopping)
            log.warning("turn %s: event %d not traced: tracing has stopped", event.turn_id, event.seq)

    def _observe(self, event: Event) -> None:
        try:
            self._spans.observe(event)
            if self._on_trace is not None and self._spans.trace_id is not None:
                on_trace, self._on_trace = self._on_trace, None
                on_trace(self._spans.trace_id)
        except Exception:  # tracing never breaks a turn
            log.exception("turn %s: tracing event %d failed", event.turn_id, event.seq)


def tracer_from_settings(settings: Settings) -> TurnTracer | None:
    """The tracer the settings ask for, or None when tracing is off: OTLP export when an endpoint is set,
    MLflow when ``trace_turns`` is on or a tracking URI is set."""
    tracing = settings.tracing
    backends: list[TraceBackend] = []
    if tracing.otel_exporter_otlp_endpoint is not None:
        provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
        exporter = OTLPSpanExporter(endpoint=f"{tracing.otel_exporter_otlp_endpoint}/v1/traces")
        provider.add_span_processor(BatchSpanProcessor(exporter))
        backends.append(OtelBackend(provider))
    if tracing.mlflow_on:
        from fleet_rlm.service.tracing_mlflow import MlflowBackend

        backends.append(MlflowBackend(tracing.mlflow_tracking_uri or default_mlflow_uri(settings)))
    return TurnTracer(*backends, model=settings.lm.model) if backends else None


def default_mlflow_uri(settings: Settings) -> str:
    """A local MLflow store under Fleet's data dir."""
    folder = settings.data_dir / "mlflow"
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"
