"""The ``data`` of every event type, as pydantic models: what emitters build and the schema publishes.

Each payload class names its event type (``event_type``) and where its event hangs in the span tree
(``span``, for the docs). Field order is the order on the wire. A field that is sometimes left out
is marked ``exclude_if`` (omitted when None), so dumping a payload gives exactly today's ``data``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fleet_rlm.protocol.events import EventDataError, EventType
from fleet_rlm.protocol.routes import Mode, Route
from fleet_rlm.protocol.status import AnswerSource, ChildOutcome, TurnStatus

OutputStream = Literal["stdout", "stderr"]
BudgetKind = Literal["iterations", "model_calls", "tokens", "cost", "children", "deadline", "sandbox_restarts"]


def _absent(value: Any) -> bool:
    return value is None


def _one_number(schema: dict[str, Any]) -> None:
    """``int | float`` keeps an integer limit an integer on the wire; to JSON Schema both are a number."""
    schema.pop("anyOf", None)
    schema["type"] = "number"


def _never_null(schema: dict[str, Any]) -> None:
    """A field left out when None is only optional on the wire, never null: say so in its schema."""
    schema.pop("default", None)
    options = [option for option in schema.pop("anyOf", []) if option != {"type": "null"}]
    if len(options) == 1:
        schema.update(options[0])
    else:
        schema["anyOf"] = options


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Payload(_Model):
    """The ``data`` of one event type."""

    event_type: ClassVar[EventType]
    span: ClassVar[str]
    summary: ClassVar[str] = ""

    def to_data(self) -> dict[str, Any]:
        return self.model_dump()


# Parts shared by several payloads -------------------------------------------------------------


class SandboxInfo(_Model):
    backend: str
    isolated: bool


class TurnLimits(_Model):
    max_iterations: int
    max_model_calls: int
    turn_timeout: float
    execution_timeout: float


class Usage(_Model):
    """What a turn used, reported by its terminal event and stored on the turn."""

    route: Route | None = Field(description="the route that ran; null when the turn ended before one was chosen")
    model_calls: int = Field(description="root, sub-model and child agents, one counter")
    root_calls: int = Field(description="calls of the root model")
    sub_calls: int = Field(description="calls of the sub-model: `llm_query`, triage")
    child_calls: int = Field(description="calls made by child agents")
    children: int = Field(description="child agents started")
    input_tokens: int = Field(description="as reported by the endpoint")
    output_tokens: int = Field(description="as reported by the endpoint")
    iterations: int = Field(description="iterations of the turn's own loop")
    sandbox_errors: int = Field(description="executions that raised")
    duration: float = Field(description="seconds")


class NoUsage(_Model):
    """`{}`: the turn ended before it ran (cancelled while queued, or a server error)."""


class ChildUsage(_Model):
    model_calls: int
    input_tokens: int
    output_tokens: int
    iterations: int


class ArtifactRecord(_Model):
    path: str
    size: int
    sha256: str


# One payload per event type, in the order a turn emits them ------------------------------------


class TurnStarted(Payload):
    event_type = EventType.TURN_STARTED
    span = "root"
    summary = (
        "the turn began running; the server sends it as soon as it takes the turn, before the turn's "
        "sandbox is ready (`kernel.*` events follow once it is)"
    )

    schema_version: int = Field(alias="schema", description="the schema version")
    task: str
    context_paths: list[str]
    mode: str = Field(description="requested: `hybrid`, `rlm`, `flex`, `direct`")
    sandbox: SandboxInfo
    budget: TurnLimits

    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True, validate_by_alias=True)


class LostVariable(_Model):
    name: str
    reason: str = Field(description="why it is gone, e.g. `not picklable`, `over the snapshot budget`")


KernelEndReason = Literal["idle", "lru", "restart", "server_restart", "died"]


class KernelEvicted(Payload):
    event_type = EventType.KERNEL_EVICTED
    span = "root"
    summary = (
        "the session's kernel from earlier turns ended between turns (idle timeout, least recently used, "
        "a restart, the server's restart or its worker's death); its live variables are gone"
    )

    reason: KernelEndReason
    detail: str = Field(description="the same, in words")
    at: float | None = Field(description="when it ended (Unix seconds); null when unknown (the server restarted)")


class KernelStarted(Payload):
    event_type = EventType.KERNEL_STARTED
    span = "root"
    summary = "a fresh kernel (a sandbox whose Python state lives on across the session's turns) was started"

    sandbox_id: str


class KernelRestored(Payload):
    event_type = EventType.KERNEL_RESTORED
    span = "root"
    summary = (
        "variables of earlier turns were loaded into the fresh kernel from the session's snapshot (inside "
        "the sandbox); those that could not be are listed as lost, and the model is told both"
    )

    restored: list[str]
    lost: list[LostVariable]


class RouteSelected(Payload):
    event_type = EventType.ROUTE_SELECTED
    span = "root"
    summary = "see [routes](routes.md)"

    route: Route
    reason: str
    mode: Mode


class IterationStarted(Payload):
    event_type = EventType.ITERATION_STARTED
    span = "iteration"

    iteration: int = Field(description="1-based")
    max_iterations: int


class ReasoningDelta(Payload):
    event_type = EventType.REASONING_DELTA
    span = "iteration"

    text: str = Field(description="a piece of the model's reasoning as it is written, from streaming endpoints")


class CodeDelta(Payload):
    event_type = EventType.CODE_DELTA
    span = "iteration"

    text: str = Field(description="a piece of the code as it is written, from streaming endpoints")


class Reasoning(Payload):
    event_type = EventType.REASONING
    span = "iteration"

    text: str = Field(description="the iteration's full reasoning")


class Code(Payload):
    event_type = EventType.CODE
    span = "iteration"

    code: str = Field(description="the full code about to run")


class Output(Payload):
    event_type = EventType.OUTPUT
    span = "iteration"
    summary = "output while the code runs"

    stream: OutputStream
    text: str


class ExecutionFailed(Payload):
    event_type = EventType.EXECUTION_FAILED
    span = "iteration"
    summary = "one per execution that raised"

    error_type: str = Field(description="e.g. `ZeroDivisionError`, `SyntaxError`, `TimeoutError`")
    message: str
    line: int | None = Field(description="of the iteration's code, or null")
    traceback: str = Field(description="the trimmed traceback the model saw: its own frames only, at most 30 lines")


class SandboxRestarted(Payload):
    event_type = EventType.SANDBOX_RESTARTED
    span = "iteration"
    summary = (
        "the worker died or broke its protocol while the code ran; a fresh sandbox on the same workspace "
        "carries on (variables lost, files kept) and the model is told"
    )

    cause: str = Field(description="what ended the worker, e.g. `exit status 3`, `SIGKILL at the 512 MB memory limit`")
    restart: int = Field(description="1-based count of the turn's restarts, child agents' included")
    max_restarts: int = Field(description="`max_sandbox_restarts`; one more crash fails the turn (or the child)")


class ToolStarted(Payload):
    event_type = EventType.TOOL_STARTED
    span = "tool call (parent: iteration)"

    call_id: str
    name: str
    arguments: str = Field(description="preview, ≤ 200 chars")


class ToolFinished(Payload):
    event_type = EventType.TOOL_FINISHED
    span = "tool call"

    call_id: str
    name: str
    duration: float = Field(description="s")
    error: str | None = Field(description="null on success")


class ChildStarted(Payload):
    event_type = EventType.CHILD_STARTED
    span = "child (parent: the spawning iteration)"

    child_id: str
    depth: int
    task: str
    files: list[str]


class ChildFinished(Payload):
    event_type = EventType.CHILD_FINISHED
    span = "child"
    summary = "see [child agents](delegation.md)"

    child_id: str
    depth: int
    task: str
    duration: float
    outcome: ChildOutcome
    error: str | None
    usage: ChildUsage
    artifacts: list[str] = Field(description="promoted paths under `artifacts/children/<child_id>/`")


class ArtifactCreated(Payload):
    event_type = EventType.ARTIFACT_CREATED
    span = "iteration"
    summary = "a file under `artifacts/` written or changed"

    path: str = Field(description="e.g. `artifacts/x.csv`")
    size: int


class MemoryProposed(Payload):
    event_type = EventType.MEMORY_PROPOSED
    span = "iteration"
    summary = "a `remember` proposal stored for the person to review; see [memory](memory.md)"

    entry_id: str = Field(description="the entry in `/api/v1/memory`")
    text: str = Field(description="what the turn proposes to remember")
    why: str = Field(description="what it rests on, as the turn said")


class BudgetExhausted(Payload):
    event_type = EventType.BUDGET_EXHAUSTED
    span = "root"

    budget: BudgetKind
    limit: int | float = Field(json_schema_extra=_one_number)
    used: int | None = Field(
        default=None,
        exclude_if=_absent,
        json_schema_extra=_never_null,
        description="iterations run; only with `iterations`",
    )


class TurnWarning(Payload):
    event_type = EventType.WARNING
    span = "root or iteration"

    message: str


class TurnCompleted(Payload):
    event_type = EventType.TURN_COMPLETED
    span = "root"

    answer: str = Field(description="Markdown")
    answer_source: AnswerSource
    unverified: bool
    unverified_reason: str | None
    usage: Usage
    artifacts: list[ArtifactRecord]
    evidence: list[str] = Field(
        default_factory=list,
        description="lines printed by code that ran without error that state the answer's figures or names, "
        "at most 8 of at most 200 characters each; sandbox output, shown escaped; see below",
    )


class TurnIncomplete(Payload):
    event_type = EventType.TURN_INCOMPLETE
    span = "root"

    answer: str = Field(description="says plainly that there is no result, and why")
    reason: str = Field(description="one line")
    usage: Usage


class TurnFailed(Payload):
    event_type = EventType.TURN_FAILED
    span = "root"

    reason: str = Field(description="one line")
    usage: Usage | NoUsage


class TurnCancelled(Payload):
    event_type = EventType.TURN_CANCELLED
    span = "root"

    reason: str
    usage: Usage | NoUsage


class TurnInterrupted(Payload):
    event_type = EventType.TURN_INTERRUPTED
    span = "root"

    reason: str = Field(description="the process running the turn died, found at start-up; or the server shut down")
    usage: Usage | NoUsage | None = Field(
        default=None,
        exclude_if=_absent,
        json_schema_extra=_never_null,
        description="only when the server shut down while the turn ran",
    )


PAYLOADS: tuple[type[Payload], ...] = (
    TurnStarted,
    KernelEvicted,
    KernelStarted,
    KernelRestored,
    RouteSelected,
    IterationStarted,
    ReasoningDelta,
    CodeDelta,
    Reasoning,
    Code,
    Output,
    ExecutionFailed,
    SandboxRestarted,
    ToolStarted,
    ToolFinished,
    ChildStarted,
    ChildFinished,
    ArtifactCreated,
    MemoryProposed,
    BudgetExhausted,
    TurnWarning,
    TurnCompleted,
    TurnIncomplete,
    TurnFailed,
    TurnCancelled,
    TurnInterrupted,
)
"""Every event type but ``heartbeat`` (sent by servers only, no payload)."""

PAYLOAD_OF: dict[EventType, type[Payload]] = {payload.event_type: payload for payload in PAYLOADS}


def parsed_payload(type: EventType, data: dict[str, Any]) -> Payload:
    """``data`` of an event of ``type`` (as JSON gives it: enums as their values) as its payload model."""
    model = PAYLOAD_OF.get(type)
    if model is None:
        raise EventDataError(f"a {type.value} event carries no data")
    try:
        return model.model_validate(data, strict=False)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, error['loc'])) or 'data'}: {error['msg']}" for error in exc.errors())
        raise EventDataError(f"{type.value} event data does not match the protocol: {problems}") from None


def terminal_payload(status: TurnStatus, **fields: Any) -> Payload:
    """The data of the event that ends a turn with final ``status``, from the turn's outcome.

    ``fields`` may name more than that event carries (``answer`` for a failed turn, say); only the
    event's own fields are kept. ``usage`` is the stored dict: ``{}`` when the turn never ran.
    """
    payload = PAYLOAD_OF[status.terminal_event]
    return payload.model_validate({name: fields[name] for name in payload.model_fields if name in fields})
