"""A forged session archive, field by field: each field an archive may hold is held to its rule, the
refusal (422 ``invalid_archive_field``) names the field, and nothing of the refused import is kept;
on SQLite and PostgreSQL alike. Paths and the memory file are held to the upload's rules."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx

from fleet_rlm.api.schemas import MAX_INT32
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.sse import event_frames

from .archive_forgery import EventLines, Manifest, rewrite
from .server import RunningServer
from .test_hostile_input import assert_refused, finished_turn

LONG_NAME = "n" * 256


def exported(http: httpx.Client, model_server: ScriptedModelServer) -> bytes:
    """A real session's archive: one finished turn with its events, and one uploaded file."""
    http.post("/sessions", json={"name": "s"})
    assert http.post("/sessions/s/files", files={"file": ("notes.txt", b"notes")}).status_code == 201
    finished_turn(http, model_server, "s")
    return http.get("/sessions/s/export").content


def stored_state(http: httpx.Client, api: RunningServer) -> tuple[object, ...]:
    """Everything a refused import could have left: sessions, memory, the sessions' blob directories."""
    sessions = api.settings.home / "sessions"
    folders = sorted(p.name for p in sessions.iterdir()) if sessions.exists() else []
    return http.get("/sessions").json()["items"], http.get("/memory").json()["items"], folders


def _set(path: str, value: object) -> Callable[[Manifest], None]:
    """Set ``turns.0.created_at``-style ``path`` in the manifest to ``value``."""

    def change(manifest: Manifest) -> None:
        *parents, last = path.split(".")
        target: Any = manifest
        for step in parents:
            target = target[int(step)] if step.isdigit() else target[step]
        target[int(last) if last.isdigit() else last] = value

    return change


def _event(field: str, value: object) -> Callable[[EventLines], None]:
    def change(lines: EventLines) -> None:
        lines[0][field] = value

    return change


FORGED_MANIFESTS: dict[str, tuple[str, object, str]] = {
    # what: (manifest path, forged value, the field the refusal names and what it says)
    "a creation time that overflows in UTC": (
        "session.created_at",
        "0001-01-01T00:00:00+14:00",
        "session.created_at: '0001-01-01T00:00:00+14:00' is out of range once converted to UTC",
    ),
    "a turn's time that overflows in UTC": (
        "turns.0.finished_at",
        "9999-12-31T23:59:59-14:00",
        "turns[0].finished_at: '9999-12-31T23:59:59-14:00' is out of range",
    ),
    "a time that is not text": ("turns.0.started_at", 17, "turns[0].started_at: must be an ISO 8601 timestamp"),
    "a session name that is not text": ("session.name", ["s2"], "session.name: Input should be a valid string"),
    "a session name that is a number": ("session.name", 7, "session.name: Input should be a valid string"),
    "a turn message that is not text": ("turns.0.message", {"m": 1}, "turns[0].message: Input should be a valid"),
    "a turn position past 32 bits": ("turns.0.position", 2**31, "turns[0].position: Input should be less than"),
    "a file size past 64 bits": ("files.0.size", 2**63, "files[0].size: Input should be less than"),
    "a media type with CR/LF": (
        "files.0.media_type",
        "text/plain\r\nSet-Cookie: a=b",
        "files[0].media_type: 'text/plain\\r\\nSet-Cookie: a=b' is not a media type",
    ),
    "a media type with U+2028": ("files.0.media_type", "text/plain\u2028", "files[0].media_type: "),
    "a media type that is prose": ("files.0.media_type", "<script>alert(1)</script>", "is not a media type"),
    "a path with a control character": (
        "files.0.path",
        "files/a\x01b.txt",
        "files[0].path: refused path 'files/a\\x01b.txt': it holds the control character U+0001",
    ),
    "a path with a name longer than 255 bytes": (
        "files.0.path",
        f"files/{LONG_NAME}",
        "files[0].path: refused path",
    ),
    "a path outside the stored directories": ("files.0.path", "tmp/x.txt", "files[0].path: refused path"),
    "the memory file as an upload": ("files.0.path", "memory/MEMORIES.md", "files[0]: 'memory/MEMORIES.md' has"),
    "a context path that escapes": ("turns.0.context_paths", ["../etc/passwd"], "turns[0].context_paths[0]: "),
    "usage that is not an object": ("turns.0.usage", [1, 2], "turns[0].usage: Input should be a valid dictionary"),
}


def test_a_forged_manifest_field_is_refused_naming_it_and_nothing_is_stored(
    api: RunningServer, model_server: ScriptedModelServer
) -> None:
    with api.http() as http:
        archive = exported(http, model_server)
        before = stored_state(http, api)
        for forgery, (path, value, says) in FORGED_MANIFESTS.items():
            forged = rewrite(archive, manifest=_set(path, value))
            refused = http.post("/sessions/import", files={"archive": ("a.tar.gz", forged)}, data={"name": "copy"})
            assert refused.status_code == 422, (forgery, refused.text)
            assert_refused(refused, 422, "invalid_archive_field", says)
        assert stored_state(http, api) == before


def test_the_memory_file_is_refused_whatever_origin_an_archive_gives_it(
    api: RunningServer, model_server: ScriptedModelServer
) -> None:
    with api.http() as http:
        archive = exported(http, model_server)
        before = stored_state(http, api)
        for origin in ("artifact", "upload"):

            def as_memory(manifest: Manifest, origin: str = origin) -> None:
                manifest["files"][0].update(path="memory/MEMORIES.md", origin=origin)

            forged = rewrite(archive, manifest=as_memory)
            refused = http.post("/sessions/import", files={"archive": ("a.tar.gz", forged)}, data={"name": "copy"})
            assert_refused(refused, 422, "invalid_archive_field", f"has origin {origin!r}; under memory/")
        assert stored_state(http, api) == before


FORGED_EVENTS: dict[str, tuple[str, object, str]] = {
    "a span id that is a list": ("span_id", ["a", "b"], "events/1.jsonl[0].span_id: Input should be a valid string"),
    "a seq of 2**63": ("seq", 2**63, "events/1.jsonl[0].seq: Input should be less than or equal to 2147483647"),
    "a seq past 32 bits": ("seq", MAX_INT32 + 1, "events/1.jsonl[0].seq: Input should be less than or equal to"),
    "a time that is text": ("ts", "yesterday", "events/1.jsonl[0].ts: Input should be a valid number"),
    "data that is not an object": ("data", "text", "events/1.jsonl[0].data: Input should be a valid dictionary"),
    "a heartbeat": ("type", "heartbeat", "events/1.jsonl[0].type: a heartbeat is never stored"),
    "data that breaks its event's payload": (
        "data",
        {"task": 7},
        "events/1.jsonl[0].data: turn.started event data does not match the protocol: schema: Field required",
    ),
}


def test_a_forged_event_field_is_refused_naming_it_and_nothing_is_stored(
    api: RunningServer, model_server: ScriptedModelServer
) -> None:
    with api.http() as http:
        archive = exported(http, model_server)
        before = stored_state(http, api)
        for forgery, (field, value, says) in FORGED_EVENTS.items():
            forged = rewrite(archive, events=_event(field, value))
            refused = http.post("/sessions/import", files={"archive": ("a.tar.gz", forged)}, data={"name": "copy"})
            assert refused.status_code == 422, (forgery, refused.text)
            assert_refused(refused, 422, "invalid_archive_field", says)
        assert stored_state(http, api) == before


def test_a_number_json_does_not_have_is_refused(api: RunningServer, model_server: ScriptedModelServer) -> None:
    """Python's json reads NaN and Infinity (and makes 1e999 infinite): a NaN ``ts`` was stored as NULL
    and reported as a taken session name."""
    first_ts = re.compile(rb'"ts": ?[0-9.e+-]+')
    with api.http() as http:
        archive = exported(http, model_server)
        before = stored_state(http, api)
        for number in ("NaN", "Infinity", "-Infinity", "1e999"):
            forged = rewrite(archive, event_bytes=lambda data, n=number: first_ts.sub(f'"ts": {n}'.encode(), data, 1))
            refused = http.post("/sessions/import", files={"archive": ("a.tar.gz", forged)}, data={"name": "copy"})
            assert_refused(refused, 400, "invalid_archive", "events/1.jsonl is not valid JSON")
            assert number.lstrip("-") in refused.json()["message"] or "too large" in refused.json()["message"]
        assert stored_state(http, api) == before


def test_an_archive_at_every_bound_imports_and_its_stream_ends(
    api: RunningServer, model_server: ScriptedModelServer
) -> None:
    """The largest seq the database holds imports, and reading the turn's events sends it once and ends
    (a larger one was stored on SQLite and sent again and again, forever)."""

    def last_seq_at_the_bound(lines: EventLines) -> None:
        lines[-1]["seq"] = MAX_INT32

    def at_bounds(manifest: Manifest) -> None:
        manifest["session"]["created_at"] = "0001-01-01T00:00:00-00:00"
        manifest["files"][0].update(path=f"files/{'n' * 255}", media_type="text/x-fleet-notes")

    with api.http() as http:
        archive = exported(http, model_server)
        bounded = rewrite(archive, manifest=at_bounds, events=last_seq_at_the_bound)
        imported = http.post("/sessions/import", files={"archive": ("a.tar.gz", bounded)}, data={"name": "copy"})
        assert imported.status_code == 201, imported.text
        [turn] = http.get("/sessions/copy/turns").json()["items"]
        with http.stream("GET", f"/turns/{turn['id']}/events") as stream:
            seqs = [int(frame.id) for frame in event_frames(stream)]
        assert seqs[-1] == MAX_INT32 and seqs.count(MAX_INT32) == 1
        [file] = http.get("/sessions/copy/files").json()["items"]
        assert (file["path"], file["media_type"]) == (f"files/{'n' * 255}", "text/x-fleet-notes")
        assert http.get("/sessions/copy").json()["created_at"].startswith("0001-01-01T00:00:00")
        finished_turn(http, model_server, "copy")  # its workspace takes the file


def test_an_upload_path_the_file_system_cannot_hold_is_refused_and_later_turns_run(
    api: RunningServer, model_server: ScriptedModelServer
) -> None:
    """A name of 256 bytes was stored; every later turn of the session then failed to place it."""
    with api.http() as http:
        http.post("/sessions", json={"name": "s"})
        for path in (LONG_NAME, f"dir/{'é' * 128}.txt", "/".join(["d" * 200] * 6)):
            refused = http.post("/sessions/s/files", files={"file": ("x.txt", b"x")}, data={"path": path})
            assert_refused(refused, 400, "invalid_path", "refused path")
        assert http.get("/sessions/s/files").json()["items"] == []
        stored = http.post("/sessions/s/files", files={"file": ("x.txt", b"x")}, data={"path": "n" * 255})
        assert stored.status_code == 201, stored.text
        model_server.script("root", rlm_step("List.", "import os\nSUBMIT(answer=str(len(os.listdir('files'))))"))
        turn_id = http.post("/sessions/s/turns", json={"message": "how many files?"}).json()["id"]
        finished = _wait(http, turn_id)
        assert (finished["status"], finished["answer"]) == ("completed", "1"), finished


def _wait(http: httpx.Client, turn_id: str) -> dict[str, Any]:
    with http.stream("GET", f"/turns/{turn_id}/events") as stream:
        for _ in event_frames(stream):
            pass
    return dict(http.get(f"/turns/{turn_id}").json())
