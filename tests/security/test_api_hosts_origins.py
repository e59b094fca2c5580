"""Web pages cannot drive a local server: unknown Host names (DNS rebinding) get 421, state changes
from another origin (cross-site forms, fetches) get 403 unless the operator lists the origin."""

from __future__ import annotations

import time

from fleet_rlm.models.scripted import Reply, ScriptedModelServer, rlm_step

from .api_server import StartServer, fleet_serve, http, serve_env

__all__ = ["fleet_serve", "serve_env"]

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def test_a_rebound_host_name_is_refused_and_changes_nothing(fleet_serve: StartServer) -> None:
    server = fleet_serve()
    port = server.port
    with http(server) as client:
        for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1.attacker.example:{port}", ""):
            refused = client.get("/sessions", headers={"Host": host})
            assert refused.status_code == 421, host
            assert refused.json()["code"] == "host_not_allowed" and "FLEET_ALLOWED_HOSTS" in refused.json()["message"]
        created = client.post("/sessions", json={"name": "rebound"}, headers={"Host": f"attacker.example:{port}"})
        assert created.status_code == 421
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}", "127.0.0.2"):
            assert client.get("/health", headers={"Host": host}).status_code == 200, host
        assert client.get("/sessions").json()["items"] == []


def test_the_operator_lists_the_names_a_server_answers(fleet_serve: StartServer) -> None:
    server = fleet_serve(FLEET_ALLOWED_HOSTS="fleet.example.com, *.corp.example")
    with http(server) as client:
        for host in ("fleet.example.com", "FLEET.example.com:443", "ui.corp.example", "127.0.0.1"):
            assert client.get("/health", headers={"Host": host}).status_code == 200, host
        for host in ("corp.example", "fleet.example.com.evil", "example.com"):
            assert client.get("/health", headers={"Host": host}).status_code == 421, host


def test_a_cross_site_form_post_cannot_cancel_a_turn_or_delete_a_session(
    fleet_serve: StartServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", Reply(text=rlm_step("Slow.", "SUBMIT(answer='finished')"), delay=3.0))
    server = fleet_serve()
    with http(server) as client:
        client.post("/sessions", json={"name": "mine"})
        turn_id = client.post("/sessions/mine/turns", json={"message": "work"}).json()["id"]
        for origin in ("https://evil.example", "null", "http://localhost:3000", f"http://127.0.0.1:{server.port + 1}"):
            cancel = client.post(f"/turns/{turn_id}/cancel", content=b"", headers={**FORM, "Origin": origin})
            assert cancel.status_code == 403, origin
            assert cancel.json()["code"] == "origin_not_allowed" and "FLEET_CORS_ORIGINS" in cancel.json()["message"]
        no_origin = client.post(f"/turns/{turn_id}/cancel", headers={**FORM, "Sec-Fetch-Site": "cross-site"})
        assert no_origin.status_code == 403
        evil = {"Origin": "https://evil.example"}
        assert client.delete("/sessions/mine", headers=evil).status_code == 403
        assert client.post("/sessions", json={"name": "planted"}, headers=evil).status_code == 403
        assert client.patch("/sessions/mine", json={"title": "owned"}, headers=evil).status_code == 403
        preflight = client.options(
            "/sessions",
            headers={**evil, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"},
        )
        assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers
        reading = client.get("/sessions", headers=evil)
        assert reading.status_code == 200 and "access-control-allow-origin" not in reading.headers

        deadline = time.monotonic() + 60
        while client.get(f"/turns/{turn_id}").json()["status"] in ("queued", "running"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        turn = client.get(f"/turns/{turn_id}").json()
        assert (turn["status"], turn["answer"]) == ("completed", "finished")
        assert [s["name"] for s in client.get("/sessions").json()["items"]] == ["mine"]
        assert client.get("/sessions/mine").json()["title"] is None

        same_origin = {"Origin": f"http://127.0.0.1:{server.port}", "Sec-Fetch-Site": "same-origin"}
        assert client.post("/sessions", json={"name": "from-the-ui"}, headers=same_origin).status_code == 201


def test_a_listed_origin_may_call_the_api_with_cors(fleet_serve: StartServer) -> None:
    server = fleet_serve(FLEET_CORS_ORIGINS="https://ui.example.com")
    ui = {"Origin": "https://ui.example.com"}
    with http(server) as client:
        preflight = client.options(
            "/sessions",
            headers={**ui, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"},
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://ui.example.com"
        created = client.post("/sessions", json={"name": "cors"}, headers=ui)
        assert created.status_code == 201 and created.headers["access-control-allow-origin"] == "https://ui.example.com"
        assert created.headers["access-control-expose-headers"] == "ETag, Location, Content-Disposition"
        other = client.post("/sessions", json={"name": "other"}, headers={"Origin": "https://ui.example.com.evil"})
        assert other.status_code == 403
