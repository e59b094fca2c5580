"""The token: an empty one is none, it never reaches the log, browsers stream with a ticket instead,
and the API's own documents sit behind it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.sse import event_frames

from .api_server import TOKEN, StartServer, fleet_serve, http, serve_env

__all__ = ["fleet_serve", "serve_env"]


def test_an_empty_token_is_no_token_so_an_open_bind_is_refused(
    fleet_serve: StartServer, serve_env: dict[str, str], tmp_path: Path
) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "fleet_rlm", "serve", "--host", "0.0.0.0"],
        env={**serve_env, "FLEET_API_TOKEN": "  "},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "FLEET_API_TOKEN" in refused.stderr

    server = fleet_serve(FLEET_API_TOKEN="")
    with http(server) as anonymous:
        assert anonymous.get("/sessions").status_code == 200


def test_tokens_and_tickets_never_reach_the_access_log(
    fleet_serve: StartServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"))
    server = fleet_serve(FLEET_API_TOKEN=TOKEN)
    with http(server, TOKEN) as client, http(server) as browser:
        client.post("/sessions", json={"name": "s"})
        turn_id = client.post("/sessions/s/turns", json={"message": "x"}).json()["id"]
        ticket = client.post(f"/turns/{turn_id}/events/ticket").json()
        with browser.stream("GET", ticket["url"].removeprefix("/api/v1")) as sse:
            assert sse.status_code == 200
            assert [f.event for f in event_frames(sse)][-1] == "turn.completed"
        for params in ({"token": TOKEN}, {"%74oken": TOKEN}, {"after": "0", "Token": TOKEN}, {"x": TOKEN}):
            assert browser.get(f"/turns/{turn_id}/events", params=params).status_code == 401
        assert client.get("/health", params={"token": TOKEN}).status_code == 200
    server.stop()

    log = server.log.read_text()
    assert f'"GET /api/v1/turns/{turn_id}/events?ticket=[redacted] HTTP/1.1" 200' in log
    assert f'"GET /api/v1/turns/{turn_id}/events?token=[redacted] HTTP/1.1" 401' in log
    assert TOKEN not in log and ticket["ticket"] not in log
    assert ticket["ticket"].split(".")[-1] not in log


def test_a_stream_ticket_opens_its_own_stream_once_and_nothing_else(
    fleet_serve: StartServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Done.", "SUBMIT(answer='one')"), rlm_step("Done.", "SUBMIT(answer='two')"))
    server = fleet_serve(FLEET_API_TOKEN=TOKEN)
    with http(server, TOKEN) as client, http(server) as browser:
        client.post("/sessions", json={"name": "a"})
        client.post("/sessions", json={"name": "b"})
        first = client.post("/sessions/a/turns", json={"message": "x"}).json()["id"]
        second = client.post("/sessions/b/turns", json={"message": "y"}).json()["id"]
        assert browser.post(f"/turns/{first}/events/ticket").status_code == 401
        assert client.post("/turns/turn_missing/events/ticket").json()["code"] == "turn_not_found"
        ticket = client.post(f"/turns/{first}/events/ticket").json()["ticket"]

        other_stream = browser.get(f"/turns/{second}/events", params={"ticket": ticket})
        assert other_stream.status_code == 401 and "not valid for this stream" in other_stream.json()["message"]
        for path in ("/sessions", f"/turns/{first}", "/sessions/a/files"):
            assert browser.get(path, params={"ticket": ticket}).status_code == 401, path
        assert browser.post(f"/turns/{first}/cancel", params={"ticket": ticket}).status_code == 401
        forged = ticket[:-1] + ("0" if ticket[-1] != "0" else "1")
        assert browser.get(f"/turns/{first}/events", params={"ticket": forged}).status_code == 401

        with browser.stream("GET", f"/turns/{first}/events", params={"ticket": ticket}) as sse:
            assert sse.status_code == 200
            frames = list(event_frames(sse))
        assert frames[-1].event == "turn.completed"
        again = browser.get(f"/turns/{first}/events", params={"ticket": ticket})
        assert again.status_code == 401 and "already used" in again.json()["message"]
        assert again.headers["www-authenticate"] == "Bearer"


def test_docs_and_openapi_need_the_token(fleet_serve: StartServer) -> None:
    server = fleet_serve(FLEET_API_TOKEN=TOKEN)
    with http(server) as anonymous, http(server, TOKEN) as client:
        for path in ("/openapi.json", "/docs"):
            refused = anonymous.get(path)
            assert refused.status_code == 401 and refused.json()["code"] == "unauthorized", path
        document = client.get("/openapi.json")
        assert document.status_code == 200 and "/api/v1/turns/{turn_id}/events/ticket" in document.json()["paths"]
        docs = client.get("/docs")
        assert docs.status_code == 200 and "swagger" in docs.text.lower() and "openapi.json" in docs.text
        for path in ("/api/v1/redoc", "/openapi.json", "/docs", "/redoc"):
            assert client.get(server.base_url + path).status_code == 404, path


def test_without_a_token_docs_stay_open_on_loopback(fleet_serve: StartServer) -> None:
    server = fleet_serve()
    with http(server) as anonymous:
        assert anonymous.get("/openapi.json").json()["info"]["title"] == "Fleet RLM"
        assert anonymous.get("/docs").status_code == 200
