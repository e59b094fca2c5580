from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi import routing
from fastapi.dependencies import utils

from .conftest import SettingsFactory
from .server import server_in_thread


@pytest.fixture
def thread_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What FastAPI hands to its thread pool while serving (a plain ``def`` handler or dependency),
    by name; it still runs there."""
    hops: list[str] = []

    def recording(run: Callable[..., Any]) -> Callable[..., Any]:
        async def hop(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            hops.append(getattr(kwargs.get("function", function), "__qualname__", repr(function)))
            return await run(function, *args, **kwargs)

        return hop

    monkeypatch.setattr(utils, "run_in_threadpool", recording(utils.run_in_threadpool))
    monkeypatch.setattr(routing, "run_in_threadpool", recording(routing.run_in_threadpool))
    return hops


def test_requests_are_served_on_the_event_loop_without_a_hop_to_a_thread(
    make_settings: SettingsFactory, thread_hops: list[str]
) -> None:
    """A plain ``def`` dependency or handler runs on FastAPI's thread pool: each request would wait for a
    thread, then for the event loop again, and a burst of requests would start threads meanwhile."""
    with server_in_thread(make_settings(sandbox_pool_size=0, api_token="secret")) as server:
        headers = {"Authorization": "Bearer secret"}
        with server.http(headers=headers) as http:
            assert http.post("/sessions", json={"name": "s"}).status_code == 201
            assert http.get("/sessions/s").status_code == 200
            assert http.get("/sessions").status_code == 200
            turn = http.post("/sessions/s/turns", json={"message": "hi"})
            assert turn.status_code == 202
            ticket = http.post(f"/turns/{turn.json()['id']}/events/ticket")
            assert ticket.status_code == 201
            assert http.post(f"/turns/{turn.json()['id']}/cancel").status_code == 202
            assert http.get("/sessions/s/files").status_code == 200
    assert thread_hops == []
