"""How long the Python client keeps reconnecting to a turn's event stream, and what it gives up with."""

from __future__ import annotations

import time

import httpx
import pytest

from fleet_rlm.api.client import ApiFailure, FleetClient, reconnecting

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
