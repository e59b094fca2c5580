"""What an attacker may send to the OpenAI-compatible API: every refusal is in OpenAI's error shape,
names what was wrong, and leaves no session behind and no model call made."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from pydantic import SecretStr

from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.testing.settings import SettingsFactory

from .server import RunningServer, server_in_thread

TOKEN = "t0ken"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def guarded(make_settings: SettingsFactory) -> Iterator[RunningServer]:
    settings = make_settings(api_token=SecretStr(TOKEN), sandbox_pool_size=0, json_body_limit_kb=64)
    with server_in_thread(settings) as server:
        yield server


def post(server: RunningServer, body: object, **headers: str) -> httpx.Response:
    return httpx.post(
        server.base_url + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {TOKEN}", **headers},
        timeout=30,
    )


def error_of(response: httpx.Response) -> dict[str, object]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return dict(body["error"])


def no_sessions(server: RunningServer) -> bool:
    with server.http(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        return http.get("/sessions").json()["items"] == []


@pytest.mark.parametrize(
    ("name", "status", "code"),
    [
        ("../../etc/passwd", 400, "invalid_session_name"),
        ("a/b", 400, "invalid_session_name"),
        ("import", 400, "invalid_session_name"),
        ("ses_0000000000000000", 404, "session_not_found"),
        ("x" * 65, 400, "invalid_session_name"),
        ("x" * 201, 422, "invalid_request"),
        ("-leading-dash", 400, "invalid_session_name"),
        ("%00", 400, "invalid_session_name"),
    ],
)
def test_hostile_session_names_are_refused(
    guarded: RunningServer, model_server: ScriptedModelServer, name: str, status: int, code: str
) -> None:
    for response in (
        post(guarded, {"model": "fleet-rlm", "messages": HI}, **{"X-Fleet-Session": name}),
        post(guarded, {"model": "fleet-rlm", "messages": HI, "user": name}),
    ):
        assert response.status_code == status, response.text
        assert error_of(response)["code"] == code
    assert no_sessions(guarded)
    assert model_server.model.requests == []


def test_a_nul_anywhere_in_the_conversation_is_refused(guarded: RunningServer) -> None:
    for body in (
        {"model": "fleet-rlm", "messages": [{"role": "user", "content": "a\x00b"}]},
        {"model": "fleet-rlm", "messages": [{"role": "user", "content": [{"type": "text", "text": "\x00"}]}]},
        {"model": "fleet-rlm", "messages": HI, "user": "sales\x00"},
        {"model": "fleet-rlm\x00", "messages": HI},
    ):
        response = post(guarded, body)
        assert response.status_code == 422, response.text
        error = error_of(response)
        assert error["code"] == "invalid_request" and "NUL" in str(error["message"])
    assert no_sessions(guarded)


def test_oversized_and_malformed_bodies(guarded: RunningServer, model_server: ScriptedModelServer) -> None:
    with (
        openai.OpenAI(base_url=guarded.base_url + "/v1", api_key=TOKEN, max_retries=0) as client,
        pytest.raises(openai.APIStatusError) as large,
    ):
        client.chat.completions.create(model="fleet-rlm", messages=[{"role": "user", "content": "x" * 100_000}])
    assert large.value.status_code == 413 and large.value.code == "body_too_large"
    too_many = post(guarded, {"model": "fleet-rlm", "messages": [{"role": "user", "content": "x"}] * 1001})
    assert too_many.status_code == 422 and "messages" in str(error_of(too_many)["message"])
    for body in ({"messages": HI}, {"model": "fleet-rlm", "messages": [{"role": "root", "content": "x"}]}, []):
        response = post(guarded, body)
        assert response.status_code == 422, response.text
        error_of(response)
    broken = httpx.post(
        guarded.base_url + "/v1/chat/completions",
        content=b'{"model": "fleet-rlm", "messages": [',
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    assert broken.status_code == 400 and error_of(broken)["code"] == "malformed_json"
    assert no_sessions(guarded)
    assert model_server.model.requests == []


def test_the_shared_rules_hold_here_too(guarded: RunningServer) -> None:
    foreign = post(guarded, {"model": "fleet-rlm", "messages": HI}, Origin="https://evil.example")
    assert foreign.status_code == 403 and error_of(foreign)["code"] == "origin_not_allowed"
    rebound = post(guarded, {"model": "fleet-rlm", "messages": HI}, Host="evil.example")
    assert rebound.status_code == 421 and error_of(rebound)["code"] == "host_not_allowed"
    in_url = httpx.get(guarded.base_url + f"/v1/models?token={TOKEN}")
    assert in_url.status_code == 401 and error_of(in_url)["code"] == "unauthorized"
    wrong_method = httpx.get(guarded.base_url + "/v1/chat/completions", headers={"Authorization": f"Bearer {TOKEN}"})
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert error_of(wrong_method)["code"] == "method_not_allowed"
    unknown = httpx.get(guarded.base_url + "/v1/embeddings", headers={"Authorization": f"Bearer {TOKEN}"})
    assert unknown.status_code == 404 and error_of(unknown)["type"] == "not_found_error"
    assert no_sessions(guarded)
