"""A kernel that ends between turns (idle timeout, least recently used, restart, cancel) is said,
never silent: the next turn's events and the model's inputs tell what was restored and what is gone."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import httpx

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.settings import SettingsFactory
from tests.api.server import server_in_thread
from tests.api.test_crash_recovery import processes_mentioning

from .conftest import events_of, root_prompt, run_turn

DEFINE = """rows = [1, 2, 3]
label = 'sales'
def double(x):
    return 2 * x
SUBMIT(answer='defined')"""
USE_RESTORED = "SUBMIT(answer=f\"{sum(rows)} {label} {'double' in globals()}\")"


def _define(http: httpx.Client, model_server: ScriptedModelServer, session: str) -> None:
    http.post("/sessions", json={"name": session})
    model_server.script("root", rlm_step("Define.", DEFINE))
    assert run_turn(http, session, "define")["answer"] == "defined"


def _wait_ended(http: httpx.Client, session: str, timeout: float = 20) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kernel = http.get(f"/sessions/{session}/kernel").json()
        if not kernel["live"]:
            return dict(kernel)
        time.sleep(0.1)
    raise AssertionError(f"the kernel of {session} is still live")


def _assert_restored_and_said(turn: dict[str, object], model_server: ScriptedModelServer, reason: str) -> None:
    assert turn["status"] == "completed", turn
    assert turn["answer"] == "6 sales False"
    [evicted] = events_of(turn, "kernel.evicted")  # type: ignore[arg-type]
    assert evicted["reason"] == reason
    assert events_of(turn, "kernel.started")  # type: ignore[arg-type]
    [restored] = events_of(turn, "kernel.restored")  # type: ignore[arg-type]
    assert sorted(restored["restored"]) == ["label", "rows"]
    assert restored["lost"] == [{"name": "double", "reason": "a function defined in the session cannot be snapshotted"}]
    prompt = root_prompt(model_server)
    assert "The Python state of earlier turns was lost because" in prompt
    assert "Restored from the session's snapshot" in prompt and "- rows: list" in prompt
    assert "Gone (recompute them if needed):" in prompt
    assert "- double: a function defined in the session cannot be snapshotted" in prompt


def test_an_idle_kernel_times_out_and_the_next_turn_restores_and_is_told(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    with server_in_thread(make_settings(sandbox_kernel_idle_timeout=0.5)) as api, api.http() as http:
        _define(http, model_server, "s")
        ended = _wait_ended(http, "s")
        assert ended["ended"]["reason"] == "idle"  # type: ignore[index]
        assert ended["snapshot"]["saved"] and "rows" in ended["snapshot"]["saved"]  # type: ignore[index]
        model_server.script("root", rlm_step("Use.", USE_RESTORED))
        turn = run_turn(http, "s", "use")
        _assert_restored_and_said(turn, model_server, "idle")
        assert "idle longer than the idle timeout" in root_prompt(model_server)


def test_past_max_kernels_the_least_recently_used_ends_and_sessions_stay_apart(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    with server_in_thread(make_settings(sandbox_max_kernels=1)) as api, api.http() as http:
        _define(http, model_server, "a")
        http.post("/sessions", json={"name": "b"})
        model_server.script(
            "root",
            rlm_step("Look.", "SUBMIT(answer=str(sorted(k for k in ('rows', 'label', 'double') if k in globals())))"),
        )
        other = run_turn(http, "b", "look around")
        assert other["answer"] == "[]", "a session saw another session's kernel"
        assert http.get("/sessions/b/kernel").json()["live"] is True
        assert _wait_ended(http, "a")["ended"]["reason"] == "lru"  # type: ignore[index]

        model_server.script("root", rlm_step("Use.", USE_RESTORED))
        turn = run_turn(http, "a", "use")
        _assert_restored_and_said(turn, model_server, "lru")
        assert "least recently used" in root_prompt(model_server)
        # b's kernel made room for a's, and b's fresh kernel holds nothing of a's snapshot either.
        model_server.script("root", rlm_step("Look.", "SUBMIT(answer=str('rows' in globals()))"))
        assert run_turn(http, "b", "look again")["answer"] == "False"


def test_a_restart_ends_the_kernel_and_drops_its_snapshot_and_the_next_turn_is_told(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    with server_in_thread(make_settings()) as api, api.http() as http:
        _define(http, model_server, "s")
        restarted = http.post("/sessions/s/kernel/restart")
        assert restarted.status_code == 200, restarted.text
        body = restarted.json()
        assert body["live"] is False and body["ended"]["reason"] == "restart" and body["snapshot"] is None
        model_server.script("root", rlm_step("Look.", "SUBMIT(answer=str('rows' in globals()))"))
        turn = run_turn(http, "s", "look")
        assert turn["answer"] == "False"
        [evicted] = events_of(turn, "kernel.evicted")
        assert evicted["reason"] == "restart"
        [restored] = events_of(turn, "kernel.restored")
        assert restored["restored"] == [] and {item["name"] for item in restored["lost"]} == {"rows", "label", "double"}
        assert "- rows: no snapshot holds it" in root_prompt(model_server)


def test_restart_while_a_turn_runs_is_refused_and_a_missing_session_is_404(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    with server_in_thread(make_settings()) as api, api.http() as http:
        http.post("/sessions", json={"name": "s"})
        model_server.script("root", rlm_step("Slow.", "print('started', flush=True)\nimport time\ntime.sleep(30)"))
        turn_id = http.post("/sessions/s/turns", json={"message": "slow"}).json()["id"]
        _wait_for_output(http, turn_id, "started")
        busy = http.post("/sessions/s/kernel/restart")
        assert busy.status_code == 409 and busy.json()["code"] == "kernel_busy"
        assert http.get("/sessions/s/kernel").json()["busy"] is True
        http.post(f"/turns/{turn_id}/cancel")
        assert http.get("/sessions/nope/kernel").status_code == 404
        assert http.post("/sessions/nope/kernel/restart").status_code == 404


def test_a_cancel_mid_turn_ends_the_kernel_and_the_next_turn_restores_and_is_told(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    with server_in_thread(make_settings()) as api, api.http() as http:
        _define(http, model_server, "s")
        model_server.script(
            "root", rlm_step("Slow.", "rows.append(4)\nprint('started', flush=True)\nimport time\ntime.sleep(30)")
        )
        turn_id = http.post("/sessions/s/turns", json={"message": "slow"}).json()["id"]
        _wait_for_output(http, turn_id, "started")
        assert http.post(f"/turns/{turn_id}/cancel").status_code == 202
        ended = _wait_ended(http, "s")
        assert ended["ended"]["reason"] == "died"  # type: ignore[index]
        model_server.script("root", rlm_step("Use.", USE_RESTORED))
        turn = run_turn(http, "s", "use")
        # The snapshot is the last completed turn's: the cancelled turn's change is not in it.
        _assert_restored_and_said(turn, model_server, "died")


def _wait_for_output(http: httpx.Client, turn_id: str, text: str) -> None:
    found = threading.Event()
    with http.stream("GET", f"/turns/{turn_id}/events") as stream:
        from fleet_rlm.testing.sse import event_frames

        for frame in event_frames(stream):
            if frame.event == "output" and text in frame.json()["data"]["text"]:
                found.set()
                break
    assert found.is_set()


def test_a_kernel_whose_worker_dies_while_idle_is_said_and_a_deleted_session_takes_its_kernel_along(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, home: Path
) -> None:
    with server_in_thread(make_settings()) as api, api.http() as http:
        _define(http, model_server, "s")
        sandbox_id = http.get("/sessions/s/kernel").json()["sandbox_id"]
        for pid in processes_mentioning(sandbox_id):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        model_server.script("root", rlm_step("Use.", USE_RESTORED))
        turn = run_turn(http, "s", "use")
        _assert_restored_and_said(turn, model_server, "died")
        assert "its worker ended" in root_prompt(model_server)

        sandbox_id = http.get("/sessions/s/kernel").json()["sandbox_id"]
        assert (home / "sandboxes" / sandbox_id).exists()
        assert http.delete("/sessions/s").status_code == 204
        assert not (home / "sandboxes" / sandbox_id).exists() and not processes_mentioning(sandbox_id)
        assert http.get("/health").json()["kernels"]["live"] == 0
