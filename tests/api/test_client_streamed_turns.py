"""``FleetClient.stream_turn``: a turn submitted and streamed in one request, against a real server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fleet_rlm.api.client import ApiFailure, FleetClient
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.testing.proxy import CuttableProxy
from fleet_rlm.testing.settings import scripted_settings

from .server import RunningServer, server_in_thread

TWO_PARTS = "print('part one', flush=True)\nimport time\ntime.sleep(1.5)\nprint('part two')\nSUBMIT(answer='done')"
TWO_OUTPUTS = "print('part one', flush=True)\nprint('part two')\nSUBMIT(answer='done')"
SLOW = "print('started', flush=True)\nimport time\ntime.sleep(30)"
QUICK = rlm_step("Done.", "SUBMIT(answer='ok')")


@pytest.fixture
def server(model_server: ScriptedModelServer, home: Path) -> Iterator[RunningServer]:
    """One backend is enough: what is tested here is the client."""
    with server_in_thread(scripted_settings(model_server, home, sandbox_pool_size=1)) as running:
        yield running


def record_requests(client: FleetClient) -> list[httpx.Request]:
    """Every request the client sends from now on, in order."""
    sent: list[httpx.Request] = []
    client.http.event_hooks = {"request": [sent.append], "response": []}
    return sent


def event_gets(sent: list[httpx.Request]) -> list[httpx.Request]:
    return [r for r in sent if r.method == "GET" and r.url.path.endswith("/events")]


def submissions(sent: list[httpx.Request]) -> list[httpx.Request]:
    return [r for r in sent if r.method == "POST" and r.url.path.endswith("/turns")]


def test_a_streamed_submission_gives_the_whole_turn_in_one_request(
    server: RunningServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Two parts.", TWO_OUTPUTS))
    with server.client() as client:
        session = client.create_session()
        sent = record_requests(client)
        with client.stream_turn(session["id"], "Two parts", idempotency_key="once") as turn:
            events = list(turn)
        assert [r.url.path for r in sent] == [f"/api/v1/sessions/{session['id']}/turns"]
        assert sent[0].headers["accept"] == "text/event-stream" and sent[0].headers["idempotency-key"] == "once"
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert events[0].type is EventType.TURN_STARTED and events[-1].type is EventType.TURN_COMPLETED
        assert {e.turn_id for e in events} == {turn.turn_id}
        assert "".join(e.data["text"] for e in events if e.type is EventType.OUTPUT) == "part one\npart two\n"
        assert list(client.follow(turn.turn_id)) == events, "the stored stream is the one streamed"


def test_the_turn_id_is_known_before_any_event_is_read_so_it_can_be_cancelled(
    server: RunningServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Slow.", SLOW))
    with server.client() as client, server.client() as canceller:
        session = client.create_session()
        with client.stream_turn(session["id"], "Slow") as turn:
            canceller.cancel(turn.turn_id)
            events = list(turn)
    assert events[-1].type is EventType.TURN_CANCELLED


def test_a_cut_stream_resumes_by_the_get_after_the_last_event_seen(
    server: RunningServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Two parts.", TWO_PARTS))
    port = int(server.base_url.rsplit(":", 1)[1])
    proxy = CuttableProxy(port)
    seen: list[Event] = []
    resumed_after: list[tuple[str | None, int]] = []

    def note_get(request: httpx.Request) -> None:
        if request.url.path.endswith("/events"):
            resumed_after.append((request.headers.get("last-event-id"), seen[-1].seq if seen else 0))

    try:
        with FleetClient(proxy.url) as client:
            session = client.create_session()
            sent = record_requests(client)
            client.http.event_hooks["request"].append(note_get)
            with client.stream_turn(session["id"], "Two parts") as turn:
                for event in turn:
                    seen.append(event)
                    if event.type is EventType.OUTPUT and "part one" in event.data["text"]:
                        threading.Timer(0.2, proxy.cut).start()
    finally:
        proxy.close()
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1)), "nothing missed, nothing repeated"
    assert seen[-1].type is EventType.TURN_COMPLETED
    assert [e.data["text"] for e in seen if e.type is EventType.OUTPUT] == ["part one\n", "part two\n"]
    assert len(submissions(sent)) == 1 and event_gets(sent)
    header, last_seen = resumed_after[0]
    assert last_seen > 0 and header == str(last_seen), "the GET resumes after the last event the POST gave"


def test_an_error_answer_raises_with_its_code_and_streams_nothing(
    server: RunningServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Slow.", SLOW))
    with server.client() as client:
        sent = record_requests(client)
        with pytest.raises(ApiFailure) as missing:
            client.stream_turn("nobody", "hello")
        assert (missing.value.status, missing.value.code) == (404, "session_not_found")

        session = client.create_session()
        running = client.submit_turn(session["id"], "Slow")
        with pytest.raises(ApiFailure) as busy:
            client.stream_turn(session["id"], "another")
        assert (busy.value.status, busy.value.code) == (409, "turn_in_progress")
        assert not event_gets(sent)
        client.cancel(running["id"])


def test_an_answer_without_a_usable_location_is_a_clear_error(
    server: RunningServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", QUICK, QUICK)
    answers: list[httpx.Response] = []

    def damage_location(response: httpx.Response) -> None:
        if response.request.method == "POST" and response.request.url.path.endswith("/turns"):
            answers.append(response)
            if len(answers) == 1:
                del response.headers["location"]
            else:
                response.headers["location"] = "/api/v1/sessions/elsewhere"

    messages: list[str] = []
    with server.client() as client:
        client.http.event_hooks = {"request": [], "response": [damage_location]}
        for name in ("without", "malformed"):
            session = client.create_session(name=name)
            with pytest.raises(ApiFailure) as unusable:
                client.stream_turn(session["id"], "hello")
            assert (unusable.value.status, unusable.value.code) == (202, "unusable_location")
            messages.append(unusable.value.message)
    assert all("Location header" in message for message in messages)
    assert "got none" in messages[0] and "got '/api/v1/sessions/elsewhere'" in messages[1]
    assert all(answer.is_closed for answer in answers), "the refused stream was closed"


def test_a_server_that_answers_the_turn_as_json_is_followed_by_the_get(
    server: RunningServer, model_server: ScriptedModelServer
) -> None:
    """A server from before the streamed submission ignores the ``Accept`` (here: told to)."""
    model_server.script("root", QUICK)

    def ask_json(request: httpx.Request) -> None:
        request.headers["accept"] = "application/json"

    with server.client() as client:
        session = client.create_session()
        sent = record_requests(client)
        client.http.event_hooks["request"].insert(0, ask_json)
        with client.stream_turn(session["id"], "hello") as turn:
            events = list(turn)
    assert events[-1].type is EventType.TURN_COMPLETED and {e.turn_id for e in events} == {turn.turn_id}
    assert len(submissions(sent)) == 1 and len(event_gets(sent)) == 1
