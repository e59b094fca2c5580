"""Unusual input, sent as an attacker would, gets a documented 4xx, never a server error or a broken
stream; on SQLite and PostgreSQL alike (PostgreSQL refuses a NUL in text, SQLite stores it)."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import httpx
import pytest

from fleet_rlm.api.schemas import MAX_INT32
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.settings import SettingsFactory
from fleet_rlm.testing.sse import event_frames

from .archive_forgery import rewrite
from .server import RunningServer, server_in_thread

HUGE = "99999999999999999999"
NUL = "\x00"


def finished_turn(http: httpx.Client, model_server: ScriptedModelServer, session: str) -> str:
    model_server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"))
    turn_id = str(http.post(f"/sessions/{session}/turns", json={"message": "hi"}).json()["id"])
    deadline = time.monotonic() + 60
    while http.get(f"/turns/{turn_id}").json()["status"] in ("queued", "running"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return turn_id


def assert_refused(response: httpx.Response, status: int, code: str, names: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code
    assert names in body["message"], body["message"]


def test_integer_query_parameters_past_their_maximum_get_422(
    api: RunningServer, model_server: ScriptedModelServer
) -> None:
    with api.http() as http:
        session = http.post("/sessions", json={"name": "s"}).json()["id"]
        turn_id = finished_turn(http, model_server, session)
        for url, name in (
            (f"/sessions?offset={HUGE}", "offset"),
            (f"/sessions?offset={MAX_INT32 + 1}", "offset"),
            (f"/sessions/s/turns?after={HUGE}", "after"),
            (f"/turns/{turn_id}/events?after={HUGE}", "after"),
        ):
            assert_refused(http.get(url), 422, "invalid_request", name)
        assert http.get(f"/sessions?offset={MAX_INT32}").json() == {"items": [], "next_offset": None}
        assert http.get(f"/sessions/s/turns?after={MAX_INT32}").json() == {"items": [], "next_after": None}
        assert http.get("/health").status_code == 200


@pytest.mark.parametrize("header", ["²", "١٢", "12²", "-1", "+1", "1 2", "0x10", "", str(MAX_INT32 + 1), HUGE])
def test_last_event_id_takes_ascii_digits_only(
    api: RunningServer, model_server: ScriptedModelServer, header: str
) -> None:
    with api.http() as http:
        session = http.post("/sessions", json={}).json()["id"]
        turn_id = finished_turn(http, model_server, session)
        refused = http.get(f"/turns/{turn_id}/events", headers={"Last-Event-ID": header.encode()})
        assert_refused(refused, 400, "invalid_last_event_id", "ASCII digits")
        assert str(MAX_INT32) in refused.json()["message"]


def test_a_stream_after_the_last_event_ends_cleanly_rather_than_dropping(
    api: RunningServer, model_server: ScriptedModelServer
) -> None:
    with api.http() as http:
        session = http.post("/sessions", json={}).json()["id"]
        turn_id = finished_turn(http, model_server, session)
        for headers, query in (({"Last-Event-ID": str(MAX_INT32)}, ""), ({}, f"?after={MAX_INT32}")):
            with http.stream("GET", f"/turns/{turn_id}/events{query}", headers=headers) as stream:
                assert stream.status_code == 200
                assert list(event_frames(stream)) == []  # read to its end: no reset, no half frame
        with http.stream("GET", f"/turns/{turn_id}/events", headers={"Last-Event-ID": "1"}) as stream:
            assert next(int(f.id) for f in event_frames(stream)) == 2


def test_a_stream_ticket_that_is_not_ascii_is_refused_not_a_server_error(make_settings: SettingsFactory) -> None:
    with server_in_thread(make_settings(api_token="t0ken")) as server, server.http() as http:
        headers = {"Authorization": "Bearer t0ken"}
        session = http.post("/sessions", json={}, headers=headers).json()["id"]
        turn_id = http.post(f"/sessions/{session}/turns", json={"message": "hi"}, headers=headers).json()["id"]
        for ticket in ("².nonce.mac", "١.nonce.mac", f"{HUGE}{HUGE}.n.m"):
            refused = http.get(f"/turns/{turn_id}/events", params={"ticket": ticket})
            assert_refused(refused, 401, "unauthorized", "stream ticket")
        http.post(f"/turns/{turn_id}/cancel", headers=headers)


def test_a_nul_character_is_refused_with_422_naming_the_field(api: RunningServer) -> None:
    with api.http() as http:
        session = http.post("/sessions", json={"name": "s"}).json()["id"]
        for body, field in (
            ({"title": f"a{NUL}b"}, "title"),
            ({"name": f"n{NUL}"}, "name"),
            ({"settings": {"lm_model": f"openai/x{NUL}"}}, "settings"),
            ({"settings": {f"key{NUL}": 1}}, "settings"),
            ({"settings": {"deep": [{"er": NUL}]}}, "/deep/0/er"),
        ):
            assert_refused(http.post("/sessions", json=body), 422, "invalid_request", field)
            assert_refused(http.patch("/sessions/s", json=body), 422, "invalid_request", field)
        for body, field in (({"message": f"hi{NUL}"}, "message"), ({"message": "hi", "context_paths": [NUL]}, "0")):
            assert_refused(http.post("/sessions/s/turns", json=body), 422, "invalid_request", field)
        for url, name in (("/sessions/%00", "session"), ("/turns/t%00/cancel", "turn_id")):
            assert_refused(http.get(url) if "cancel" not in url else http.post(url), 422, "invalid_request", name)
        assert_refused(http.delete("/sessions/s/files/files/a%00b"), 422, "invalid_request", "path")
        assert_refused(http.get("/sessions/s/files/files/a%00b"), 422, "invalid_request", "path")
        for url, name in (("/labels?group=g%00", "group"), ("/labels?session=s%00", "session")):
            assert_refused(http.get(url), 422, "invalid_request", name)
        assert_refused(http.get("/memory?session=s%00"), 422, "invalid_request", "session")
        upload = http.post("/sessions/s/files", files={"file": ("x.txt", b"x")}, data={"path": f"a{NUL}b"})
        assert_refused(upload, 422, "invalid_request", "path")
        archive = http.get("/sessions/s/export").content
        imported = http.post("/sessions/import", files={"archive": ("a.tar.gz", archive)}, data={"name": f"n{NUL}"})
        assert_refused(imported, 422, "invalid_request", "name")

        session_now = http.get(f"/sessions/{session}").json()
        assert session_now["title"] is None and session_now["settings"] == {}
        assert http.get("/sessions").json()["items"] == [session_now]
        assert http.get("/sessions/s/turns").json()["items"] == []


def test_an_archive_holding_a_nul_is_refused_on_both_databases(api: RunningServer) -> None:
    with api.http() as http:
        http.post("/sessions", json={"name": "s", "title": "fine"})
        archive = http.get("/sessions/s/export").content
        forged = rewrite(archive, manifest=lambda manifest: manifest["session"].update(title=f"bad{NUL}title"))
        refused = http.post("/sessions/import", files={"archive": ("a.tar.gz", forged)})
        assert_refused(refused, 400, "invalid_archive", "NUL")
        assert [s["name"] for s in http.get("/sessions").json()["items"]] == ["s"]


@pytest.mark.parametrize("name", ["line\nbreak.txt", "tab\there.txt", "esc\x1b[31m.txt", "del\x7f.txt", "nel\x85.txt"])
def test_an_upload_path_with_a_control_character_is_refused_naming_it(api: RunningServer, name: str) -> None:
    with api.http() as http:
        http.post("/sessions", json={"name": "s"})
        as_path = http.post("/sessions/s/files", files={"file": ("x.txt", b"x")}, data={"path": name})
        assert_refused(as_path, 422, "invalid_request", "path:")
        assert f"U+{ord(next(c for c in name if not c.isprintable())):04X}" in as_path.json()["message"]
        if "\n" not in name:  # a newline would end the part's header
            # Written by hand: httpx escapes control characters in a file name, an attacker need not.
            head = f'--b\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n\r\n'
            as_filename = http.post(
                "/sessions/s/files",
                content=head.encode() + b"x\r\n--b--\r\n",
                headers={"Content-Type": "multipart/form-data; boundary=b"},
            )
            assert_refused(as_filename, 422, "invalid_request", "file (its file name)")
        assert http.get("/sessions/s/files").json()["items"] == []


@pytest.mark.parametrize("name", ["a file with spaces.txt", "ünïcödé ✓.txt", "100%#?&=.txt", "dir/sub/x.txt"])
def test_an_accepted_upload_can_be_read_back(api: RunningServer, name: str) -> None:
    with api.http() as http:
        http.post("/sessions", json={"name": "s"})
        stored = http.post("/sessions/s/files", files={"file": ("x.txt", b"bytes")}, data={"path": name})
        assert stored.status_code == 201, stored.text
        path = stored.json()["path"]
        read = http.get(f"/sessions/s/files/{quote(path)}")
        assert read.status_code == 200 and read.content == b"bytes"


def test_a_malformed_multipart_body_is_a_documented_400(api: RunningServer) -> None:
    with api.http() as http:
        http.post("/sessions", json={"name": "s"})
        for body in (
            b"no multipart here",
            b'--b\r\nContent-Disposition: form-data; filename="x"\r\n\r\nx\r\n--b--\r\n',
        ):
            broken = http.post(
                "/sessions/s/files", content=body, headers={"Content-Type": "multipart/form-data; boundary=b"}
            )
            assert_refused(broken, 400, "malformed_body", "")
        assert http.get("/sessions/s/files").json()["items"] == []


def test_a_nul_in_what_the_sandbox_answers_is_stored_on_both_databases(
    api: RunningServer, model_server: ScriptedModelServer
) -> None:
    """PostgreSQL cannot store U+0000: the turn's end failed to commit on every retry, leaving the
    turn running and its session blocked. It is stored (and streamed) as U+FFFD instead."""
    model_server.script("root", rlm_step("Hostile.", "print('out\\x00put')\nSUBMIT(answer='a\\x00b')"))
    with api.http() as http:
        session = http.post("/sessions", json={}).json()["id"]
        turn_id = http.post(f"/sessions/{session}/turns", json={"message": "hi"}).json()["id"]
        deadline = time.monotonic() + 60
        while (turn := http.get(f"/turns/{turn_id}").json())["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, "the turn's end was never committed"
            time.sleep(0.05)
        assert turn["status"] == "completed" and turn["answer"] == "a\ufffdb"
        with http.stream("GET", f"/turns/{turn_id}/events") as stream:
            frames = list(event_frames(stream))
        assert json.loads(frames[-1].data)["data"]["answer"] == "a\ufffdb"
        assert finished_turn(http, model_server, session)  # the session is not blocked
