"""Per-session settings and turn options have server-side maxima: past one, 422 naming the field and
the maximum; archived settings obey the same rules; a session stored above a lowered maximum cannot
run until changed."""

from __future__ import annotations

import json

import httpx

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step

from . import bombs
from .api_server import StartServer, fleet_serve, http, serve_env

__all__ = ["fleet_serve", "serve_env"]


def _refusal(response: httpx.Response) -> str:
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "invalid_settings", response.json()
    return str(response.json()["message"])


def test_settings_past_the_servers_maximum_are_refused_naming_field_and_maximum(
    fleet_serve: StartServer, model_server: ScriptedModelServer
) -> None:
    server = fleet_serve(FLEET_CEILING_MAX_ITERATIONS="8")
    with http(server) as client:
        cases = {
            "turn_timeout": (86_400, "3600"),
            "execution_timeout": (10_000, "600"),
            "max_iterations": (9, "8"),
            "max_model_calls": (100_000, "500"),
            "max_output_chars": (10**9, "200000"),
            "max_tokens_per_turn": (10**12, "10000000"),
            "lm_max_tokens": (10**9, "200000"),
            "sub_lm_max_tokens": (10**9, "200000"),
        }
        for field, (value, maximum) in cases.items():
            message = _refusal(client.post("/sessions", json={"settings": {field: value}}))
            assert field in message and maximum in message, message
        assert "0.0..2.0" in _refusal(client.post("/sessions", json={"settings": {"lm_temperature": 7}}))
        assert "lm_base_url" in _refusal(client.post("/sessions", json={"settings": {"lm_base_url": "http://x"}}))
        assert client.get("/sessions").json()["items"] == []

        created = client.post("/sessions", json={"name": "s", "settings": {"max_iterations": 8, "turn_timeout": 3600}})
        assert created.status_code == 201
        message = _refusal(client.patch("/sessions/s", json={"settings": {"turn_timeout": 3601}}))
        assert "turn_timeout" in message and "FLEET_CEILING_TURN_TIMEOUT" in message
        message = _refusal(client.post("/sessions/s/turns", json={"message": "x", "max_iterations": 9}))
        assert "max_iterations" in message and "8" in message
        assert client.get("/sessions/s/turns").json()["items"] == []

        model_server.script("root", rlm_step("Done.", "SUBMIT(answer='within limits')"))
        turn = client.post("/sessions/s/turns", json={"message": "x", "max_iterations": 8, "turn_timeout": 600})
        assert turn.status_code == 202
        with client.stream("GET", f"/turns/{turn.json()['id']}/events") as sse:
            for _ in sse.iter_lines():
                pass
        assert client.get(f"/turns/{turn.json()['id']}").json()["answer"] == "within limits"


def test_a_session_stored_above_a_lowered_maximum_cannot_run_until_changed(fleet_serve: StartServer) -> None:
    first = fleet_serve()
    with http(first) as client:
        assert client.post("/sessions", json={"name": "s", "settings": {"max_iterations": 50}}).status_code == 201
    first.stop()
    second = fleet_serve(FLEET_CEILING_MAX_ITERATIONS="10")
    with http(second) as client:
        message = _refusal(client.post("/sessions/s/turns", json={"message": "x"}))
        assert "this session's setting 'max_iterations'" in message and "10" in message and "PATCH" in message
        assert client.get("/sessions/s/turns").json()["items"] == []  # refused before anything was queued
        assert client.patch("/sessions/s", json={"settings": {"max_iterations": 10}}).status_code == 200


def test_an_archive_cannot_smuggle_settings_the_api_refuses(fleet_serve: StartServer) -> None:
    server = fleet_serve()
    with http(server) as client:
        for settings, named in (
            ({"lm_base_url": "http://attacker.example/v1"}, "lm_base_url"),
            ({"sandbox_allow_unisolated": True}, "sandbox_allow_unisolated"),
            ({"turn_timeout": 10**6}, "turn_timeout"),
        ):
            manifest = json.loads(bombs.manifest(0))
            manifest["session"]["settings"] = settings
            archive = bombs.valid_tar_gz({"manifest.json": json.dumps(manifest).encode()})
            refused = client.post("/sessions/import", files={"archive": ("a.tar.gz", archive)})
            assert named in _refusal(refused) and "archived session" in refused.json()["message"]
        assert client.get("/sessions").json()["items"] == []
