"""Each turn as one OpenTelemetry span tree, built from its events: collected by the SDK's in-memory
exporter, and exported over real OTLP/HTTP to a local receiver (the optional extra ``fleet-rlm[tracing]``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the tracing extra is not installed (uv sync --all-extras)")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from fleet_rlm.clients.terminal.client import ChatClient
from fleet_rlm.config import Settings
from fleet_rlm.models.scripted import Reply, ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import EventType
from fleet_rlm.service.service import FleetService, configured_tracer
from fleet_rlm.service.tracing import OtelBackend, TurnTracer
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.store import Database, TurnRecord
from fleet_rlm.testing.otlp import OtlpReceiver
from fleet_rlm.testing.settings import SettingsFactory, scripted_settings
from tests.api.server import server_in_thread
from tests.clients.terminal.test_actions import Chat

pytestmark = pytest.mark.anyio

PARENT = """results = spawn_agents([{'task': 'child ok'}, {'task': 'child broken'}])
SUBMIT(answer=' / '.join(str(r['status']) for r in results))"""


def _script(server: ScriptedModelServer) -> None:
    server.model.default = lambda request: "hi from the sub-model"
    server.script_for_task(
        "root",
        "PARENT",
        rlm_step("Ask, then divide.", "print(llm_query('say hi'))\n1/0"),
        rlm_step("Two children.", PARENT),
    )
    server.script_for_task("root", "child ok", rlm_step("Easy.", "SUBMIT(answer='done')"))
    server.script_for_task("root", "child broken", Reply(status=500, text="model exploded"))


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


async def _run_turn(settings: Settings, tracer: TurnTracer | None = None) -> TurnRecord:
    fleet = FleetService(settings, tracer=tracer)
    await fleet.start()
    try:
        await fleet.sessions.create(name="traced")
        turn, _ = await fleet.turns.submit("traced", TurnSubmission(message="PARENT runs two children"))
        done = await fleet.turns.wait(turn.id)
        assert done.status == "completed", done.error
        return done
    finally:
        await fleet.stop()


def _by_name(spans: Any) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


async def test_a_turn_is_one_span_tree_with_iterations_model_calls_code_tools_and_children(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, exporter: InMemorySpanExporter
) -> None:
    _script(model_server)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    done = await _run_turn(make_settings(), TurnTracer(OtelBackend(provider), model="openai/root"))
    turn_id = done.id

    spans: tuple[ReadableSpan, ...] = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1  # one trace per turn
    by_id = {s.context.span_id: s for s in spans}
    named = _by_name(spans)
    [root] = named["invoke_agent fleet-rlm"]
    assert root.parent is None
    assert done.trace_id == format(root.context.trace_id, "032x")  # stored on the turn
    attrs = root.attributes or {}
    assert attrs["gen_ai.operation.name"] == "invoke_agent" and attrs["fleet.turn.id"] == turn_id
    assert attrs["fleet.status"] == "completed" and attrs["fleet.route"] == "rlm"
    assert int(str(attrs["gen_ai.usage.input_tokens"])) > 0 and int(str(attrs["fleet.children"])) == 2

    def parent_of(span: ReadableSpan) -> ReadableSpan:
        assert span.parent is not None
        return by_id[span.parent.span_id]

    [route] = named["route rlm"]
    assert parent_of(route) is root
    # Routing starts once the sandbox is ready (kernel.started), not when the turn was announced.
    assert (route.start_time or 0) > (root.start_time or 0)
    root_iterations = [s for s in named["iteration 1"] + named["iteration 2"] if parent_of(s) is root]
    assert [s.name for s in sorted(root_iterations, key=lambda s: s.start_time or 0)] == ["iteration 1", "iteration 2"]
    first, second = sorted(root_iterations, key=lambda s: s.start_time or 0)
    assert (first.end_time or 0) <= (second.start_time or 0)

    # Inside the first iteration: the model's reply, then the code, which called llm_query and raised.
    inside_first = [s for s in spans if s.parent is not None and s.parent.span_id == first.context.span_id]
    chat = next(s for s in inside_first if s.name == "chat openai/root")
    assert (chat.attributes or {})["gen_ai.operation.name"] == "chat"
    execution = next(s for s in inside_first if s.name == "execute_code")
    assert execution.status.status_code is StatusCode.ERROR
    assert (execution.attributes or {})["error.type"] == "ZeroDivisionError"
    assert "division by zero" in (execution.status.description or ""), "the span says the error's message"
    assert (chat.end_time or 0) <= (execution.start_time or 0)
    tool = next(s for s in inside_first if s.name.startswith("execute_tool "))
    assert (tool.attributes or {})["gen_ai.operation.name"] == "execute_tool"
    assert (tool.attributes or {})["gen_ai.tool.name"] == "llm_query"

    # The children hang under the second iteration, each with its own subtree.
    children = named["invoke_agent fleet-rlm child"]
    assert len(children) == 2 and all(parent_of(c) is second for c in children)
    outcomes = {(c.attributes or {})["fleet.child.outcome"]: c for c in children}
    ok = next(c for outcome, c in outcomes.items() if outcome == "completed")
    broken = next(c for outcome, c in outcomes.items() if outcome != "completed")
    assert broken.status.status_code is StatusCode.ERROR
    assert int(str((ok.attributes or {})["gen_ai.usage.output_tokens"])) > 0
    ok_iterations = [s for s in spans if s.parent is not None and s.parent.span_id == ok.context.span_id]
    assert [s.name for s in ok_iterations] == ["iteration 1"]
    assert any(s.parent is not None and s.parent.span_id == ok_iterations[0].context.span_id for s in spans)
    # No content in spans: neither the task nor the code.
    assert not any("PARENT" in str(value) for s in spans for value in (s.attributes or {}).values())


def test_spans_go_over_otlp_http_and_the_api_shows_the_turns_trace_id(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    _script(model_server)
    with OtlpReceiver() as receiver:
        settings = make_settings(otel_exporter_otlp_endpoint=receiver.endpoint + "/")
        with server_in_thread(settings) as api, api.client() as client:
            client.create_session(name="traced")
            turn = client.submit_turn("traced", "PARENT runs two children")
            assert turn["trace_id"] is None or len(turn["trace_id"]) == 32
            events = list(client.events(turn["id"]))
            assert events[-1].type is EventType.TURN_COMPLETED
            record = client.turn(turn["id"])
        # the server has stopped: what the exporter buffered is sent
    assert receiver.content_types and all(t == "application/x-protobuf" for t in receiver.content_types)
    [root] = [s for s in receiver.spans if s.name == "invoke_agent fleet-rlm"]
    assert root.service == "fleet-rlm" and root.attributes["fleet.turn.id"] == turn["id"] and not root.parent_span_id
    assert record["trace_id"] == root.trace_id
    assert {s.trace_id for s in receiver.spans} == {root.trace_id}
    by_id = {s.span_id: s for s in receiver.spans}
    assert all(s.parent_span_id in by_id for s in receiver.spans if s is not root)
    names = {s.name for s in receiver.spans}
    assert {"route rlm", "iteration 1", "iteration 2", "execute_code", "invoke_agent fleet-rlm child"} <= names


async def test_untraced_turns_have_no_trace_id(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"))
    fleet = FleetService(make_settings(), database=Database(str(make_settings().database_url)))
    await fleet.start()
    try:
        assert fleet.turns.tracer is None
        await fleet.sessions.create(name="plain")
        turn, _ = await fleet.turns.submit("plain", TurnSubmission(message="x"))
        assert (await fleet.turns.wait(turn.id)).trace_id is None
    finally:
        await fleet.stop()


@pytest.mark.parametrize("endpoint", ["localhost:4318", "ftp://collector:4318", "http://collector:4318/?x=1"])
def test_a_bad_endpoint_is_refused_naming_the_setting(endpoint: str) -> None:
    with pytest.raises(ValueError, match="otel_exporter_otlp_endpoint") as caught:
        Settings.model_validate({"otel_exporter_otlp_endpoint": endpoint})
    assert endpoint in str(caught.value)


def test_tracing_is_off_without_an_endpoint() -> None:
    assert configured_tracer(Settings.model_validate({})) is None
    assert configured_tracer(Settings.model_validate({"otel_exporter_otlp_endpoint": "  "})) is None


def test_trace_in_fleet_chat_shows_the_turns_trace_id(model_server: ScriptedModelServer, home: Path) -> None:
    model_server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"))
    with OtlpReceiver() as receiver:
        settings = scripted_settings(
            model_server, home, sandbox_pool_size=1, otel_exporter_otlp_endpoint=receiver.endpoint
        )
        with server_in_thread(settings) as api, ChatClient(api.base_url) as client:
            chat = Chat(client, "work")
            chat.run("a question")
            trace = chat.run("/trace 1")
            stored = client.turns("work")[0]["trace_id"]
    assert trace[0] == "turn #1: a question"
    assert trace[-1] == f"trace id: {stored}"
    assert stored in {s.trace_id for s in receiver.spans}


@pytest.fixture
def mlflow_reset(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """MLflow keeps its tracking URI and autologging process-wide: autologging goes off after the test,
    and anything written later (a trace finished by a turn's thread after it) goes to a temporary
    store, not to ``./mlruns`` in the checkout (MLflow's default)."""
    import mlflow

    yield
    mlflow.dspy.autolog(disable=True)
    mlflow.set_tracking_uri(tmp_path_factory.mktemp("mlruns-after").as_uri())


# MLflow's own store queries use a loader strategy SQLAlchemy 2.1 deprecates (Fleet's do not).
@pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated:DeprecationWarning")
@pytest.mark.usefixtures("mlflow_reset")
def test_mlflow_gets_each_turn_as_one_trace_in_a_local_store_beside_dspy_autolog(
    model_server: ScriptedModelServer, home: Path
) -> None:
    import mlflow

    _script(model_server)
    settings = scripted_settings(model_server, home, sandbox_pool_size=1, trace_turns=True)
    # Outside any event loop, as a program would (autolog configures DSPy, which binds to its caller).
    mlflow.dspy.autolog()
    done = asyncio.run(_run_turn(settings))

    store = home / "mlflow" / "mlflow.db"
    assert store.is_file()  # the default: a local store under Fleet's data dir
    mlflow.set_tracking_uri(f"sqlite:///{store}")
    experiment = mlflow.get_experiment_by_name("fleet-rlm")
    assert experiment is not None
    [trace] = mlflow.search_traces(locations=[experiment.experiment_id], return_type="list")
    # DSPy's autologging wrote its own traces of the same run, beside the turn's, in the default experiment.
    assert mlflow.search_traces(locations=["0"], return_type="list")
    assert trace.info.trace_id == done.trace_id  # stored on the turn
    spans = trace.data.spans
    by_id = {s.span_id: s for s in spans}
    [root] = [s for s in spans if s.parent_id is None]
    assert root.name == "invoke_agent fleet-rlm" and root.span_type == "AGENT"
    assert root.attributes["fleet.turn.id"] == done.id and root.attributes["fleet.status"] == "completed"
    assert trace.info.token_usage is not None and trace.info.token_usage["input_tokens"] == done.usage["input_tokens"]
    names = {s.name for s in spans}
    assert {"route rlm", "iteration 1", "iteration 2", "execute_code", "chat openai/root"} <= names
    tool = next(s for s in spans if s.name == "execute_tool llm_query")
    assert tool.span_type == "TOOL" and by_id[tool.parent_id].name == "iteration 1"
    children = [s for s in spans if s.name == "invoke_agent fleet-rlm child"]
    assert len(children) == 2 and all(by_id[c.parent_id].name == "iteration 2" for c in children)
    failed = next(s for s in spans if s.name == "execute_code" and by_id[s.parent_id] is by_id[tool.parent_id])
    assert failed.status.status_code == "ERROR"
