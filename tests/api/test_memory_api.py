"""The memory routes over real HTTP: reviewing what turns proposed, and what an attacker can send them."""

from __future__ import annotations

import httpx
import pytest
from pydantic import SecretStr

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.settings import SettingsFactory

from .server import RunningServer, server_in_thread

PROPOSE = "print(remember('north leads revenue', 'summed sales.csv'))\nprint(remember('q3 ended in loss', 'totals'))\nSUBMIT(answer='ok')"


def run_turn(http: httpx.Client, session: str) -> str:
    http.post("/sessions", json={"name": session}).raise_for_status()
    turn = http.post(f"/sessions/{session}/turns", json={"message": "remember"}).json()
    with http.stream("GET", f"/turns/{turn['id']}/events") as stream:
        for _ in stream.iter_lines():
            pass
    return str(turn["id"])


def test_a_person_reviews_what_turns_proposed(api: RunningServer, model_server: ScriptedModelServer) -> None:
    model_server.script("root", rlm_step("Remember.", PROPOSE))
    with api.http() as http:
        turn_id = run_turn(http, "sales")
        http.post("/sessions", json={"name": "elsewhere"}).raise_for_status()
        pending = http.get("/memory", params={"status": "pending"}).json()
        assert pending["next_offset"] is None
        north, loss = pending["items"]
        assert (north["text"], north["why"], north["status"], north["turn_id"]) == (
            "north leads revenue",
            "summed sales.csv",
            "pending",
            turn_id,
        )
        assert north["session_id"] == http.get("/sessions/sales").json()["id"] and north["reviewed_at"] is None
        assert [e["id"] for e in http.get("/memory", params={"session": "sales"}).json()["items"]] == [
            north["id"],
            loss["id"],
        ]
        assert http.get("/memory", params={"session": "elsewhere"}).json()["items"] == []

        approved = http.post(f"/memory/{north['id']}/approve", json={"text": "North leads revenue (Q3)."}).json()
        assert (approved["status"], approved["text"], approved["why"]) == (
            "approved",
            "North leads revenue (Q3).",
            "summed sales.csv",
        )
        assert http.post(f"/memory/{loss['id']}/approve").json()["text"] == "q3 ended in loss"
        assert http.post(f"/memory/{loss['id']}/reject").json()["status"] == "rejected"
        assert http.get(f"/memory/{north['id']}").json() == approved
        page = http.get("/memory", params={"limit": 1}).json()
        assert len(page["items"]) == 1 and page["next_offset"] == 1
        assert http.delete(f"/memory/{loss['id']}").status_code == 204
        assert http.get(f"/memory/{loss['id']}").status_code == 404
        assert [e["text"] for e in http.get("/memory").json()["items"]] == ["North leads revenue (Q3)."]


def test_hostile_requests_get_clear_errors_and_change_nothing(
    api: RunningServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Remember.", PROPOSE))
    with api.http() as http:
        run_turn(http, "s")
        entry = http.get("/memory").json()["items"][0]
        url = f"/memory/{entry['id']}"
        cases = [
            (http.get("/memory/nope"), 404, "memory_not_found"),
            (http.get("/memory/mem_" + "0" * 16), 404, "memory_not_found"),
            (http.get("/memory/" + "m" * 5000), 404, "memory_not_found"),
            (http.get("/memory/mem_%00"), 422, "invalid_request"),  # a NUL anywhere is refused at the edge
            (http.post("/memory/..%2F..%2Fsessions/approve"), 404, "not_found"),
            (http.delete("/memory/mem_" + "f" * 16), 404, "memory_not_found"),
            (http.post(f"{url}/approve", json={"text": "x" * 1001}), 422, "invalid_memory_text"),
            (http.post(f"{url}/approve", json={"text": "a\u0000b"}), 422, "invalid_memory_text"),
            (http.post(f"{url}/approve", json={"text": "  \n "}), 422, "invalid_memory_text"),
            (http.post(f"{url}/approve", json={"text": "\u202eevil\x1b[2J"}), 422, "invalid_memory_text"),
            (http.post(f"{url}/approve", json={"text": "ok\u2067\U000e0041"}), 422, "invalid_memory_text"),
            (http.post(f"{url}/approve", json={"text": 5}), 422, "invalid_request"),
            (http.post(f"{url}/approve", json={"text": "ok", "status": "approved"}), 422, "invalid_request"),
            (http.post(f"{url}/approve", json={"text": "x" * 900_000}), 422, "invalid_memory_text"),
            (
                http.post(f"{url}/approve", content=b"{nope", headers={"content-type": "application/json"}),
                400,
                "malformed_json",
            ),
            (http.get("/memory", params={"status": "forgotten"}), 422, "invalid_request"),
            (http.get("/memory", params={"session": "nobody"}), 404, "session_not_found"),
            (http.get("/memory", params={"limit": 0}), 422, "invalid_request"),
        ]
        for response, status, code in cases:
            assert (response.status_code, response.json()["code"]) == (status, code), response.text
            assert "Traceback" not in response.text and len(response.text) < 2000
        assert http.get(url).json() == entry  # nothing above changed it


def test_memory_routes_need_the_token_when_one_is_set(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    with server_in_thread(make_settings(api_token=SecretStr("s3cret"), sandbox_pool_size=0)) as api:
        with api.http() as anonymous:
            for response in (
                anonymous.get("/memory"),
                anonymous.get("/memory/mem_" + "0" * 16),
                anonymous.post("/memory/mem_" + "0" * 16 + "/approve"),
                anonymous.post("/memory/mem_" + "0" * 16 + "/reject"),
                anonymous.delete("/memory/mem_" + "0" * 16),
            ):
                assert (response.status_code, response.json()["code"]) == (401, "unauthorized")
        with api.http(headers={"Authorization": "Bearer s3cret"}) as http:
            assert http.get("/memory").json() == {"items": [], "next_offset": None}


@pytest.mark.parametrize("path", ["/memory", "/memory/{entry_id}", "/memory/{entry_id}/approve"])
def test_the_openapi_document_describes_the_memory_routes(api: RunningServer, path: str) -> None:
    with api.http() as http:
        document = http.get("/openapi.json").json()
    assert f"/api/v1{path}" in document["paths"]
