from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from fastapi import routing
from fastapi.dependencies import utils
from starlette import _exception_handler
from starlette.middleware import errors

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.settings import SettingsFactory

from .server import server_in_thread
from .test_turns_api import SLOW

THREAD_POOL_CALLERS: list[tuple[ModuleType, str]] = [
    (utils, "run_in_threadpool"),  # plain def dependencies
    (utils, "contextmanager_in_threadpool"),  # plain def dependencies that yield
    (routing, "run_in_threadpool"),  # plain def handlers
    (_exception_handler, "run_in_threadpool"),  # plain def exception handlers
    (errors, "run_in_threadpool"),  # the plain def handler of unexpected errors
]


@pytest.fixture
def thread_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What FastAPI and Starlette hand to their thread pool while serving (a plain ``def`` handler,
    dependency or exception handler), by name; it still runs there."""
    hops: list[str] = []

    def recording(run: Callable[..., Any]) -> Callable[..., Any]:
        def hop(function: Any, *args: Any, **kwargs: Any) -> Any:
            hops.append(getattr(kwargs.get("function", function), "__qualname__", repr(function)))
            return run(function, *args, **kwargs)

        return hop

    for module, name in THREAD_POOL_CALLERS:
        monkeypatch.setattr(module, name, recording(getattr(module, name)))
    return hops


def test_requests_are_served_on_the_event_loop_without_a_hop_to_a_thread(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, thread_hops: list[str]
) -> None:
    """A plain ``def`` dependency or handler runs on FastAPI's thread pool: each request would wait for a
    thread, then for the event loop again, and a burst of requests would start threads meanwhile."""
    with server_in_thread(make_settings(sandbox_pool_size=0, api_token="secret")) as server:
        headers = {"Authorization": "Bearer secret"}
        with server.http(headers=headers) as http, server.http() as anonymous:
            assert http.post("/sessions", json={"name": "s"}).status_code == 201
            assert http.get("/sessions/s").status_code == 200
            assert http.get("/sessions").status_code == 200
            model_server.script("root", rlm_step("Slow.", SLOW))  # still running when it is cancelled
            turn = http.post("/sessions/s/turns", json={"message": "hi"})
            assert turn.status_code == 202
            ticket = http.post(f"/turns/{turn.json()['id']}/events/ticket")
            assert ticket.status_code == 201
            assert http.post(f"/turns/{turn.json()['id']}/cancel").status_code == 202
            assert http.get("/sessions/s/files").status_code == 200
            assert http.get("/memory").status_code == 200
            assert http.get("/sessions/missing").status_code == 404
            assert http.post("/sessions", json={"name": 7}).status_code == 422
            assert http.post("/sessions", content=b"{", headers={"Content-Type": "application/json"}).status_code == 400
            assert http.get("/no/such/route").status_code == 404
            assert anonymous.get("/sessions").status_code == 401
    assert thread_hops == []
