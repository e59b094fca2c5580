from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pydantic import SecretStr

from fleet_rlm.api.server import check_bind
from fleet_rlm.config import ConfigError
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.settings import SettingsFactory, scripted_settings
from fleet_rlm.testing.sse import event_frames
from tests.store.databases import PostgresDatabases

from .server import RunningServer, server_in_thread


def test_errors_are_json_with_stable_codes(api: RunningServer) -> None:
    with api.http() as http:
        http.post("/sessions", json={"name": "s"})
        cases = [
            (
                http.post("/sessions/s/turns", content=b"{not json", headers={"Content-Type": "application/json"}),
                400,
                "malformed_json",
            ),
            (http.post("/sessions/s/turns", json={"message": ""}), 422, "invalid_request"),
            (http.post("/sessions/s/turns", json={"message": "x", "max_iterations": -1}), 422, "invalid_request"),
            (http.post("/sessions/s/turns", json={"message": "x", "context_paths": ["../up"]}), 400, "invalid_path"),
            (http.post("/sessions/nope/turns", json={"message": "x"}), 404, "session_not_found"),
            (http.get("/turns/turn_missing"), 404, "turn_not_found"),
            (http.get("/turns/turn_missing/events"), 404, "turn_not_found"),
            (http.post("/turns/turn_missing/cancel"), 404, "turn_not_found"),
            (http.get("/sessions/nope/files"), 404, "session_not_found"),
            (http.get("/no/such/route"), 404, "not_found"),
            (http.put("/sessions"), 405, "method_not_allowed"),
            (http.post("/sessions/s/files", files={"other": ("x", b"1")}), 422, "invalid_request"),
        ]
        for response, status, code in cases:
            assert (response.status_code, response.json()["code"]) == (status, code), response.text
            assert response.json()["message"] and "Traceback" not in response.text


def test_bad_last_event_id_is_refused(api: RunningServer, model_server: ScriptedModelServer) -> None:
    model_server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"))
    with api.http() as http:
        http.post("/sessions", json={"name": "s"})
        turn_id = http.post("/sessions/s/turns", json={"message": "x"}).json()["id"]
        refused = http.get(f"/turns/{turn_id}/events", headers={"Last-Event-ID": "abc"})
        assert refused.status_code == 400 and refused.json()["code"] == "invalid_last_event_id"


def test_token_is_required_on_every_route_when_set(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"))
    settings = make_settings(api_token=SecretStr("s3cret"), sandbox_pool_size=0)
    with server_in_thread(settings) as api:
        with api.http() as anonymous:
            for path in ("/health", "/ready", "/sessions", "/turns/x/events"):
                refused = anonymous.get(path)
                assert refused.status_code == 401 and refused.json()["code"] == "unauthorized", path
                assert refused.headers["www-authenticate"] == "Bearer"
            assert anonymous.get("/health", headers={"Authorization": "Bearer wrong"}).status_code == 401
        with api.http(headers={"Authorization": "Bearer s3cret"}) as http:
            assert http.get("/health").status_code == 200
            http.post("/sessions", json={"name": "s"})
            turn_id = http.post("/sessions/s/turns", json={"message": "x"}).json()["id"]
            ticket = http.post(f"/turns/{turn_id}/events/ticket")
            assert ticket.status_code == 201, ticket.text
        with api.http() as browser:
            in_url = browser.get(f"/turns/{turn_id}/events", params={"token": "s3cret"})
            assert in_url.status_code == 401 and "not accepted in the URL" in in_url.json()["message"]
            with browser.stream("GET", ticket.json()["url"].removeprefix("/api/v1")) as sse:
                assert sse.status_code == 200
                events = [f.event for f in event_frames(sse)]
        assert events[-1] == "turn.completed"


def test_binding_beyond_loopback_needs_a_token(make_settings: SettingsFactory) -> None:
    check_bind(make_settings(), "127.0.0.1")
    check_bind(make_settings(), "::1")
    with pytest.raises(ConfigError, match="FLEET_API_TOKEN"):
        check_bind(make_settings(), "0.0.0.0")
    check_bind(make_settings(api_token=SecretStr("t")), "0.0.0.0")


def test_health_and_readiness(api: RunningServer) -> None:
    with api.http() as http:
        assert http.get("/health").json()["status"] == "ok"
        ready = http.get("/ready")
        assert ready.status_code == 200, ready.text
        assert ready.json()["ready"] and ready.json()["database"]["ok"] and ready.json()["sandbox"]["ok"]
        assert ready.json()["model"]["ok"] and "/models answered 200" in ready.json()["model"]["message"]


def test_readiness_reports_a_dead_model_endpoint_without_failing(model_server: ScriptedModelServer, home: Path) -> None:
    """The model endpoint is reported as `fleet doctor` reports it; sessions and files are still served."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    settings = scripted_settings(model_server, home, lm_base_url=dead, sandbox_pool_size=0)
    with server_in_thread(settings) as api, api.http() as http:
        ready = http.get("/ready")
        assert ready.status_code == 200, ready.text
        assert ready.json()["ready"] and not ready.json()["model"]["ok"]
        assert f"{dead}/models" in ready.json()["model"]["message"]


@pytest.mark.postgres
def test_readiness_fails_when_the_database_is_gone(
    postgres_databases: PostgresDatabases, model_server: ScriptedModelServer, home: Path
) -> None:
    url = postgres_databases.new_url()
    settings = scripted_settings(model_server, home, database_url=url, sandbox_pool_size=0)
    with server_in_thread(settings) as api, api.http() as http:
        assert http.get("/ready").status_code == 200
        postgres_databases.drop(url)
        ready = http.get("/ready")
        assert ready.status_code == 503
        assert not ready.json()["ready"] and not ready.json()["database"]["ok"]
        assert ready.json()["sandbox"]["ok"]
