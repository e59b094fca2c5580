from __future__ import annotations

import csv
import hashlib
import io
import json
import threading

import httpx
from httpx_sse import ServerSentEvent

from fleet_rlm.api.sse import wants_event_stream
from fleet_rlm.models.scripted import Reply, ScriptedModelServer, rlm_step
from fleet_rlm.testing.settings import SettingsFactory
from fleet_rlm.testing.sse import event_frames, wire

from .server import RunningServer, server_in_thread

SALES = b"region,quarter,revenue\nnorth,Q1,100\nsouth,Q1,80\nnorth,Q2,70\nsouth,Q2,120\neast,Q2,5\n"
READ = """import csv
rows = list(csv.DictReader(open('files/sales.csv')))
totals = {}
for row in rows:
    totals[row['region']] = totals.get(row['region'], 0) + int(row['revenue'])
print(totals)"""
SAVE = """with open('artifacts/revenue_by_region.csv', 'w') as f:
    f.write('region,revenue\\n')
    for region in sorted(totals):
        f.write(f'{region},{totals[region]}\\n')
SUBMIT(answer=', '.join(f'{r}: {t}' for r, t in sorted(totals.items())))"""
SLOW = "print('started', flush=True)\nimport time\ntime.sleep(30)"


def read_frames(response: httpx.Response, stop_after: int | None = None) -> list[ServerSentEvent]:
    """The event frames, to the terminal one (or the first ``stop_after``)."""
    frames = []
    for frame in event_frames(response):
        frames.append(frame)
        if frame.event.startswith("turn.") and frame.event != "turn.started":
            break
        if stop_after is not None and len(frames) >= stop_after:
            break
    return frames


def raw_frames(response: httpx.Response) -> list[list[str]]:
    """Every frame as sent, as its lines: what a client that keeps ``Last-Event-ID`` reads."""
    return [block.splitlines() for block in response.read().decode().split("\n\n") if block]


def test_csv_turn_end_to_end(pooled_api: RunningServer, model_server: ScriptedModelServer) -> None:
    model_server.script("root", rlm_step("Read the sales.", READ), rlm_step("Save them.", SAVE))
    api = pooled_api
    with api.http() as http:
        http.post("/sessions", json={"name": "sales"})
        http.post("/sessions/sales/files", files={"file": ("sales.csv", SALES, "text/csv")})
        accepted = http.post(
            "/sessions/sales/turns",
            json={
                "message": "Revenue by region; save artifacts/revenue_by_region.csv",
                "context_paths": ["files/sales.csv"],
            },
            headers={"Idempotency-Key": "first-try"},
        )
        assert accepted.status_code == 202, accepted.text
        turn_id = accepted.json()["id"]
        assert accepted.headers["location"] == f"/api/v1/turns/{turn_id}"

        with http.stream("GET", f"/turns/{turn_id}/events") as live:
            assert live.headers["content-type"].startswith("text/event-stream")
            assert live.headers["cache-control"] == "no-cache"
            assert live.headers["x-accel-buffering"] == "no"
            frames = read_frames(live)
        ids = [int(f.id) for f in frames]
        assert ids == list(range(1, len(ids) + 1))
        for frame in frames:
            assert frame.json()["type"] == frame.event
        assert frames[0].event == "turn.started" and frames[-1].event == "turn.completed"
        assert {"iteration.started", "code", "output", "artifact.created"} <= {f.event for f in frames}

        turn = http.get(f"/turns/{turn_id}").json()
        assert turn["status"] == "completed"
        assert turn["answer"] == "east: 5, north: 170, south: 200"
        assert turn["usage"]["root_calls"] == 2
        # The line the first code printed states the answer's figures: it is stored with the turn.
        printed = "{'north': 170, 'south': 200, 'east': 5}"
        assert turn["evidence"] == [printed]
        assert frames[-1].json()["data"]["evidence"] == [printed]

        artifact = http.get("/sessions/sales/files/artifacts/revenue_by_region.csv")
        rows = list(csv.DictReader(io.StringIO(artifact.text)))
        assert {r["region"]: int(r["revenue"]) for r in rows} == {"east": 5, "north": 170, "south": 200}
        digest = hashlib.sha256(artifact.content).hexdigest()
        assert artifact.headers["etag"] == f'"{digest}"'
        assert turn["artifacts"] == [
            {"path": "artifacts/revenue_by_region.csv", "size": len(artifact.content), "sha256": digest}
        ]
        listed = {f["path"]: f for f in http.get("/sessions/sales/files").json()["items"]}
        assert listed["artifacts/revenue_by_region.csv"]["origin"] == "artifact"

        with http.stream("GET", f"/turns/{turn_id}/events") as replay:
            replayed = read_frames(replay)
        assert wire(replayed) == wire(frames)

        again = http.post(
            "/sessions/sales/turns",
            json={
                "message": "Revenue by region; save artifacts/revenue_by_region.csv",
                "context_paths": ["files/sales.csv"],
            },
            headers={"Idempotency-Key": "first-try"},
        )
        assert again.status_code == 200 and again.json()["id"] == turn_id
        history = http.get("/sessions/sales/turns").json()
        assert [t["id"] for t in history["items"]] == [turn_id] and history["next_after"] is None
        assert history["items"][0]["evidence"] == [printed]


def test_reconnecting_with_last_event_id_misses_nothing(api: RunningServer, model_server: ScriptedModelServer) -> None:
    steps = [Reply(text=rlm_step(f"Step {i}.", f"print('step {i}')"), delay=0.15) for i in range(4)]
    model_server.script("root", *steps, Reply(text=rlm_step("Done.", "SUBMIT(answer='ok')"), delay=0.15))
    with api.http() as http:
        http.post("/sessions", json={"name": "s"})
        turn_id = http.post("/sessions/s/turns", json={"message": "count"}).json()["id"]
        with http.stream("GET", f"/turns/{turn_id}/events") as first:
            head = read_frames(first, stop_after=3)
        assert [int(f.id) for f in head] == [1, 2, 3]
        assert http.get(f"/turns/{turn_id}").json()["status"] == "running"
        with http.stream("GET", f"/turns/{turn_id}/events", headers={"Last-Event-ID": head[-1].id}) as second:
            tail = read_frames(second)
        with http.stream("GET", f"/turns/{turn_id}/events") as full:
            everything = read_frames(full)
    assert wire(head + tail) == wire(everything)
    assert everything[-1].event == "turn.completed"
    assert sum(1 for f in everything if f.event == "iteration.started") == 5


def test_cancel_conflict_and_detached_turns(api: RunningServer, model_server: ScriptedModelServer) -> None:
    model_server.script("root", rlm_step("Slow.", SLOW))
    with api.http() as http:
        http.post("/sessions", json={"name": "s"})
        turn_id = http.post("/sessions/s/turns", json={"message": "slow"}).json()["id"]
        with http.stream("GET", f"/turns/{turn_id}/events") as stream:
            for frame in event_frames(stream):
                if frame.event == "output" and "started" in frame.data:
                    break  # the connection closes here: the turn must keep running
        assert http.get(f"/turns/{turn_id}").json()["status"] == "running"

        conflict = http.post("/sessions/s/turns", json={"message": "meanwhile"})
        assert conflict.status_code == 409 and conflict.json()["code"] == "turn_in_progress"
        busy = http.delete("/sessions/s")
        assert busy.status_code == 409 and busy.json()["code"] == "session_busy"

        assert http.post(f"/turns/{turn_id}/cancel").status_code == 202
        with http.stream("GET", f"/turns/{turn_id}/events") as stream:
            frames = read_frames(stream)
        assert frames[-1].event == "turn.cancelled"
        assert http.get(f"/turns/{turn_id}").json()["status"] == "cancelled"
        again = http.post(f"/turns/{turn_id}/cancel")
        assert again.status_code == 409 and again.json()["code"] == "turn_not_active"

        model_server.script("root", rlm_step("Quick.", "SUBMIT(answer='fine')"))
        next_id = http.post("/sessions/s/turns", json={"message": "now"}).json()["id"]
        with http.stream("GET", f"/turns/{next_id}/events") as stream:
            assert read_frames(stream)[-1].event == "turn.completed"


def test_quiet_turns_get_heartbeats_without_ids(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", Reply(text=rlm_step("Slow model.", "SUBMIT(answer='ok')"), delay=1.0))
    with server_in_thread(make_settings(sse_heartbeat_seconds=0.2)) as api, api.http() as http:
        http.post("/sessions", json={"name": "s"})
        turn_id = http.post("/sessions/s/turns", json={"message": "x"}).json()["id"]
        with http.stream("GET", f"/turns/{turn_id}/events") as stream:
            frames = raw_frames(stream)
    assert frames[0] == ["retry: 1000"]
    beats = [f for f in frames if "event: heartbeat" in f]
    assert len(beats) >= 2
    for beat in beats:
        assert not any(line.startswith("id:") for line in beat), beat
        assert json.loads(beat[-1].removeprefix("data: "))["type"] == "heartbeat"
    assert "event: turn.completed" in frames[-1]


def test_concurrent_submissions_start_exactly_one_turn(api: RunningServer, model_server: ScriptedModelServer) -> None:
    model_server.script("root", rlm_step("Slow.", SLOW))
    with api.http() as http:
        http.post("/sessions", json={"name": "s"})
    statuses: list[int] = []

    def submit() -> None:
        with api.http() as http:
            statuses.append(http.post("/sessions/s/turns", json={"message": "race"}).status_code)

    threads = [threading.Thread(target=submit) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [202, 409, 409, 409, 409]
    with api.http() as http:
        running = http.get("/sessions/s/turns").json()["items"]
        assert len(running) == 1
        http.post(f"/turns/{running[0]['id']}/cancel")


STREAM = {"Accept": "text/event-stream"}


def test_a_turn_submitted_with_accept_event_stream_streams_in_the_same_response(
    api: RunningServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Read the sales.", READ), rlm_step("Save them.", SAVE))
    with api.http() as http:
        http.post("/sessions", json={"name": "sales"})
        http.post("/sessions/sales/files", files={"file": ("sales.csv", SALES, "text/csv")})
        body = {"message": "Revenue by region", "context_paths": ["files/sales.csv"]}
        with http.stream("POST", "/sessions/sales/turns", json=body, headers=STREAM) as streamed:
            assert streamed.status_code == 202
            assert streamed.headers["content-type"].startswith("text/event-stream")
            location = streamed.headers["location"]
            frames = read_frames(streamed)
        turn_id = location.removeprefix("/api/v1/turns/")
        assert [frame.event for frame in frames][:1] == ["turn.started"] and frames[-1].event == "turn.completed"
        assert [int(frame.id) for frame in frames] == list(range(1, len(frames) + 1))
        assert all(frame.json()["turn_id"] == turn_id for frame in frames)
        with http.stream("GET", f"/turns/{turn_id}/events") as replayed:
            assert wire(read_frames(replayed)) == wire(frames)
        stored = http.get(location.removeprefix("/api/v1")).json()
        assert stored["status"] == "completed" and stored["answer"] == "east: 5, north: 170, south: 200"


def test_a_retried_streamed_submission_resumes_after_its_last_event_and_errors_stay_json(
    api: RunningServer, model_server: ScriptedModelServer
) -> None:
    pause = "print('started', flush=True)\nimport time\ntime.sleep(1)"
    model_server.script("root", rlm_step("Pause.", pause), rlm_step("Done.", "SUBMIT(answer='done')"))
    with api.http() as http:
        http.post("/sessions", json={"name": "s"})
        key = {**STREAM, "Idempotency-Key": "submit-once"}
        with http.stream("POST", "/sessions/s/turns", json={"message": "pause"}, headers=key) as first:
            assert first.status_code == 202 and first.headers["vary"] == "Accept"
            head: list[ServerSentEvent] = []
            for frame in event_frames(first):
                head.append(frame)
                if frame.event == "output":
                    break  # the connection closes here: the turn must run on
        assert head[0].event == "turn.started"
        resume = {**key, "Last-Event-ID": head[-2].id}
        with http.stream("POST", "/sessions/s/turns", json={"message": "pause"}, headers=resume) as again:
            assert again.status_code == 200 and again.headers["location"] == first.headers["location"]
            block: list[str] = []
            for line in again.iter_lines():
                if not line:
                    break
                block.append(line)
        # No retry hint first (a client reopens a submission's stream by the GET), then the event after it.
        assert block[:2] == [f"id: {head[-1].id}", "event: output"]
        assert json.loads(block[2].removeprefix("data: ")) == head[-1].json()
        turn_id = first.headers["location"].rsplit("/", 1)[1]
        with http.stream("GET", f"/turns/{turn_id}/events") as rest:
            assert read_frames(rest)[-1].event == "turn.completed", "a disconnect cancelled the turn"

        missing = http.post("/sessions/nobody/turns", json={"message": "x"}, headers=STREAM)
        assert missing.status_code == 404 and missing.headers["content-type"] == "application/json"
        invalid = http.post("/sessions/s/turns", json={"message": ""}, headers=STREAM)
        assert invalid.status_code == 422 and invalid.json()["code"] == "invalid_request"
        bad_id = http.post("/sessions/s/turns", json={"message": "x"}, headers={**STREAM, "Last-Event-ID": "-1"})
        assert bad_id.status_code == 400 and bad_id.json()["code"] == "invalid_last_event_id"
        as_json_bad_id = {"Accept": "application/json", "Last-Event-ID": "²".encode()}
        bad_id = http.post("/sessions/s/turns", json={"message": "x"}, headers=as_json_bad_id)
        assert bad_id.status_code == 400 and bad_id.json()["code"] == "invalid_last_event_id"  # checked unstreamed too
        assert len(http.get("/sessions/s/turns").json()["items"]) == 1, "a refused submission made a turn"
        as_json = http.post("/sessions/s/turns", json={"message": "x"}, headers={"Accept": "application/json"})
        assert as_json.status_code == 202 and as_json.headers["vary"] == "Accept"


def test_only_an_accept_that_asks_for_event_stream_gets_one() -> None:
    asks = [
        "text/event-stream",
        "Text/Event-Stream; q=1",
        "text/event-stream, */*;q=0.1",
        "application/json;q=0.5, text/event-stream",
    ]
    declines = [
        None,
        "",
        "*/*",
        "text/*",
        "application/json",
        "application/json, text/event-stream",  # a tie is JSON
        "text/event-stream;q=0.5, application/*",
        "text/event-stream;q=0",
        "text/event-stream;q=zero",
    ]
    assert [wants_event_stream(accept) for accept in asks] == [True] * len(asks)
    assert [wants_event_stream(accept) for accept in declines] == [False] * len(declines)
