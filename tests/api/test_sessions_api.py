from __future__ import annotations

from .server import RunningServer


def test_session_crud_by_id_and_name(api: RunningServer) -> None:
    with api.http() as http:
        created = http.post("/sessions", json={"name": "q3", "title": "Q3 sales", "settings": {"max_iterations": 4}})
        assert created.status_code == 201
        session = created.json()
        assert session["id"].startswith("ses_") and session["settings"] == {"max_iterations": 4}
        assert http.get("/sessions/q3").json()["id"] == session["id"]
        assert http.get(f"/sessions/{session['id']}").json()["name"] == "q3"

        patched = http.patch("/sessions/q3", json={"title": "renamed", "mode": "rlm"})
        assert patched.status_code == 200
        assert patched.json()["title"] == "renamed" and patched.json()["name"] == "q3"

        http.post("/sessions", json={"name": "other"})
        page = http.get("/sessions", params={"limit": 1}).json()
        assert [s["name"] for s in page["items"]] == ["other"] and page["next_offset"] == 1
        rest = http.get("/sessions", params={"limit": 1, "offset": 1}).json()
        assert [s["name"] for s in rest["items"]] == ["q3"] and rest["next_offset"] is None

        assert http.delete("/sessions/q3").status_code == 204
        gone = http.get("/sessions/q3")
        assert gone.status_code == 404 and gone.json()["code"] == "session_not_found"


def test_session_conflicts_and_bad_settings_are_clear(api: RunningServer) -> None:
    with api.http() as http:
        http.post("/sessions", json={"name": "taken"})
        taken = http.post("/sessions", json={"name": "taken"})
        assert taken.status_code == 409 and taken.json()["code"] == "session_name_taken"

        secret = http.post("/sessions", json={"settings": {"lm_base_url": "http://evil.example"}})
        assert secret.status_code == 422 and secret.json()["code"] == "invalid_settings"
        assert "lm_base_url" in secret.json()["message"]

        negative = http.post("/sessions", json={"settings": {"max_iterations": 0}})
        assert negative.status_code == 422 and "max_iterations" in negative.json()["message"]

        bad_name = http.post("/sessions", json={"name": "no spaces please"})
        assert bad_name.status_code == 400 and bad_name.json()["code"] == "invalid_session_name"

        unknown_field = http.post("/sessions", json={"nmae": "typo"})
        assert unknown_field.status_code == 422 and "nmae" in unknown_field.json()["message"]
