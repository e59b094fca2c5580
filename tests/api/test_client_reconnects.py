"""How long the Python client keeps reconnecting to a turn's event stream, and what it gives up with."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from fleet_rlm.api.client import ApiFailure, FleetClient, UnreadableEvent, reconnecting

from .server import RunningServer, free_port


def test_an_unreachable_server_is_retried_with_growing_waits_then_reported() -> None:
    with FleetClient(f"http://127.0.0.1:{free_port()}") as client:
        started = time.monotonic()
        with pytest.raises(httpx.ConnectError):
            next(client.follow("turn_x", retrying=reconnecting(retries=3)))
    assert time.monotonic() - started >= 0.2 + 0.4 + 0.6


def test_a_turn_that_does_not_exist_is_reported_at_once(api: RunningServer) -> None:
    policy = reconnecting(retries=3)
    with api.client() as client, pytest.raises(ApiFailure) as missing:
        next(client.follow("turn_missing", retrying=policy))
    assert missing.value.status == 404 and missing.value.code == "turn_not_found"
    assert policy.statistics["attempt_number"] == 1, "a refusal is not retried"


class MalformedEventStream(BaseHTTPRequestHandler):
    """A server whose event stream carries one event that breaks the protocol (a wrong-typed field)."""

    FRAME = (
        'id: 1\nevent: tool.finished\ndata: {"type": "tool.finished", "seq": 1, "turn_id": "turn_x", "ts": 1.0, '
        '"span_id": "s", "parent_span_id": null, "data": {"call_id": "c", "name": "llm_query", "duration": "slow", '
        '"error": null}}\n\n'
    )

    def do_GET(self) -> None:
        body = self.FRAME.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


def test_an_event_that_breaks_the_protocol_is_reported_once_naming_it_not_retried() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), MalformedEventStream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    policy = reconnecting(retries=3)
    try:
        with FleetClient(f"http://127.0.0.1:{server.server_port}") as client, pytest.raises(UnreadableEvent) as bad:
            next(client.follow("turn_x", retrying=policy))
    finally:
        server.shutdown()
        server.server_close()
    assert "tool.finished event data" in bad.value.message and "duration" in bad.value.message
    assert policy.statistics["attempt_number"] == 1, "a server that speaks another protocol is not retried"
