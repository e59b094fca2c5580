"""Turns' span trees as MLflow traces (the optional extra ``fleet-rlm[tracing]``, on ``mlflow-skinny``).

Each turn is one MLflow trace in the experiment ``fleet-rlm``, with the same nested spans as the
OpenTelemetry export (:mod:`fleet_rlm.service.tracing`), built through MLflow's public API for spans
that start and end at given times (``mlflow.start_span_no_context``). MLflow keeps its destination
process-wide: Fleet sets the tracking URI, so ``mlflow.dspy.autolog()`` in the same process writes
its traces to the same store, beside the turns'.
"""

from __future__ import annotations

from typing import Any

import mlflow
from mlflow.entities import SpanEvent, SpanStatusCode, SpanType
from mlflow.entities.span import LiveSpan
from mlflow.tracing.constant import SpanAttributeKey

from fleet_rlm.service.tracing import SpanKindName, TraceSpan

EXPERIMENT = "fleet-rlm"
_SPAN_TYPES: dict[SpanKindName, str] = {
    "turn": SpanType.AGENT,
    "child": SpanType.AGENT,
    "route": SpanType.CHAIN,
    "iteration": SpanType.CHAIN,
    "chat": SpanType.CHAT_MODEL,
    "code": SpanType.TOOL,
    "tool": SpanType.TOOL,
    "other": SpanType.UNKNOWN,
}


def _ns(ts: float) -> int:
    return int(ts * 1e9)


class _MlflowSpan:
    def __init__(self, span: LiveSpan) -> None:
        self.span = span

    def set_attributes(self, attributes: dict[str, Any]) -> None:
        self.span.set_attributes(attributes)

    def usage(self, input_tokens: int, output_tokens: int, *, whole_turn: bool) -> None:
        self.span.set_attributes(
            {"gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens}
        )
        if whole_turn:  # MLflow sums the usage it finds in a trace: only the turn's total, once
            total = {"input_tokens": input_tokens, "output_tokens": output_tokens}
            self.span.set_attribute(
                SpanAttributeKey.CHAT_USAGE, {**total, "total_tokens": input_tokens + output_tokens}
            )

    def fail(self, error_type: str, message: str) -> None:
        self.span.set_attribute("error.type", error_type)
        self.span.set_status(SpanStatusCode.ERROR)

    def mark(self, name: str, attributes: dict[str, Any], ts: float) -> None:
        # SpanEvent is a dataclass; mypy reads its from_proto (a classmethod of the base) as abstract.
        self.span.add_event(SpanEvent(name=name, timestamp=_ns(ts), attributes=attributes))  # type: ignore[abstract]

    def end(self, ts: float) -> None:
        self.span.end(end_time_ns=_ns(ts))


class MlflowBackend:
    def __init__(self, tracking_uri: str) -> None:
        mlflow.set_tracking_uri(tracking_uri)
        experiment = mlflow.get_experiment_by_name(EXPERIMENT)
        self.experiment_id = (
            experiment.experiment_id if experiment is not None else mlflow.create_experiment(EXPERIMENT)
        )

    def start(
        self, name: str, kind: SpanKindName, parent: TraceSpan | None, ts: float, attributes: dict[str, Any]
    ) -> TraceSpan:
        span = mlflow.start_span_no_context(
            name,
            span_type=_SPAN_TYPES[kind],
            parent_span=parent.span if isinstance(parent, _MlflowSpan) else None,
            attributes=attributes,
            experiment_id=None if parent is not None else self.experiment_id,
            start_time_ns=_ns(ts),
        )
        return _MlflowSpan(span)

    def trace_id(self, root: TraceSpan) -> str:
        assert isinstance(root, _MlflowSpan)
        return str(root.span.trace_id)

    def shutdown(self) -> None:
        mlflow.flush_trace_async_logging()
