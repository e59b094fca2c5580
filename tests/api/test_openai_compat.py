"""The OpenAI-compatible API with the official ``openai`` SDK as the client, against a real server,
real sandboxes and the scripted model (docs/integrations.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from pydantic import SecretStr

from fleet_rlm.models.scripted import Reply, ScriptedModelServer, rlm_step
from fleet_rlm.testing.settings import SettingsFactory

from .server import RunningServer, server_in_thread

TOKEN = "s3cret"
COUNT = "rows = [3, 4, 5]\nprint('rows:', sum(rows))"
SUBMIT = "SUBMIT(answer=f'The rows add up to {sum(rows)}.')"
SLOW = "print('started', flush=True)\nimport time\ntime.sleep(30)"


@pytest.fixture
def guarded(make_settings: SettingsFactory) -> Iterator[RunningServer]:
    """A server with an API token, as one bound beyond loopback must have."""
    with server_in_thread(make_settings(api_token=SecretStr(TOKEN), sandbox_pool_size=0)) as server:
        yield server


_OPEN_CLIENTS: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """Each SDK client a test made is closed after it: an unclosed one's socket would be collected (a
    ResourceWarning, an error here) in whichever test runs next."""
    yield
    while _OPEN_CLIENTS:
        _OPEN_CLIENTS.pop().close()


def sdk(server: RunningServer, token: str = TOKEN, **kwargs: object) -> openai.OpenAI:
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key=token, max_retries=0, **kwargs)  # type: ignore[arg-type]
    _OPEN_CLIENTS.append(client)
    return client


def fleet(server: RunningServer) -> httpx.Client:
    return server.http(headers={"Authorization": f"Bearer {TOKEN}"})


def wait_for_status(server: RunningServer, turn_id: str, wanted: set[str]) -> str:
    with fleet(server) as http:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status = str(http.get(f"/turns/{turn_id}").json().get("status"))
            if status in wanted:
                return status
            time.sleep(0.1)
    raise AssertionError(f"turn {turn_id} never reached {wanted}")


def session_count(server: RunningServer) -> int:
    with fleet(server) as http:
        return len(http.get("/sessions").json()["items"])


def wait_for_sessions(server: RunningServer, count: int) -> None:
    deadline = time.monotonic() + 30
    while session_count(server) != count:
        assert time.monotonic() < deadline, f"expected {count} sessions"
        time.sleep(0.1)


def test_models_are_fleet_and_its_modes(guarded: RunningServer) -> None:
    models = [model.id for model in sdk(guarded).models.list()]
    assert models == ["fleet-rlm", "fleet-rlm/hybrid", "fleet-rlm/rlm", "fleet-rlm/flex", "fleet-rlm/direct"]


def test_a_completion_runs_a_turn_in_an_ephemeral_session(
    guarded: RunningServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Count the rows.", COUNT), rlm_step("Submit.", SUBMIT))
    response = sdk(guarded).chat.completions.with_raw_response.create(
        model="fleet-rlm",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What was the total last time?"},
            {"role": "assistant", "content": "There was no total yet."},
            {"role": "user", "content": "Add up the rows."},
        ],
    )
    completion = response.parse()
    message = completion.choices[0].message
    assert message.content == "The rows add up to 12."
    assert completion.choices[0].finish_reason == "stop"
    reasoning = message.model_extra["reasoning_content"]  # type: ignore[index]
    assert "Count the rows." in reasoning and "print('rows:', sum(rows))" in reasoning and "rows: 12" in reasoning
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    assert completion.id == f"chatcmpl-{response.headers['x-fleet-turn']}"
    # The conversation reached the model as the history, the instructions with the task.
    prompt = json.dumps(model_server.model.requests[0]["messages"])
    assert "What was the total last time?" in prompt and "There was no total yet." in prompt
    assert "Be brief." in prompt
    # The ephemeral session goes once its turn has ended.
    wait_for_sessions(guarded, 0)


def test_streaming_binds_a_durable_session_and_reports_usage(
    guarded: RunningServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Count the rows.", COUNT), rlm_step("Submit.", SUBMIT))
    client = sdk(guarded)
    stream = client.chat.completions.create(
        model="fleet-rlm/rlm",
        messages=[{"role": "user", "content": "Add up the rows."}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Fleet-Session": "sales"},
    )
    chunks = list(stream)
    deltas = [chunk.choices[0].delta for chunk in chunks if chunk.choices]
    reasoning = [d.model_extra.get("reasoning_content") for d in deltas if d.model_extra]
    contents = [d.content for d in deltas if d.content]
    assert deltas[0].role == "assistant"
    assert any("rows: 12" in (text or "") for text in reasoning)
    assert contents == ["The rows add up to 12."]
    # Activity comes before the answer; the finish reason, then the usage chunk, last.
    first_answer = next(i for i, d in enumerate(deltas) if d.content)
    assert all(not (d.model_extra or {}).get("reasoning_content") for d in deltas[first_answer:])
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0
    # The session is durable: it holds the turn, and the next call (only the new message) continues it.
    with fleet(guarded) as http:
        turns = http.get("/sessions/sales/turns").json()["items"]
        assert [(t["message"], t["answer"]) for t in turns] == [("Add up the rows.", "The rows add up to 12.")]
    model_server.script("root", rlm_step("Again.", "SUBMIT(answer='same')"))
    again = client.chat.completions.create(
        model="fleet-rlm", messages=[{"role": "user", "content": "And now?"}], user="sales"
    )
    assert again.choices[0].message.content == "same"
    assert "The rows add up to 12." in json.dumps(model_server.model.requests[-1]["messages"])
    assert session_count(guarded) == 1


def test_without_the_token_nothing_runs(guarded: RunningServer, model_server: ScriptedModelServer) -> None:
    with pytest.raises(openai.AuthenticationError) as raised:
        sdk(guarded, token="wrong").chat.completions.create(
            model="fleet-rlm", messages=[{"role": "user", "content": "hi"}]
        )
    assert raised.value.code == "unauthorized"
    assert raised.value.body["type"] == "authentication_error"  # type: ignore[index]
    body = {"model": "fleet-rlm", "messages": [{"role": "user", "content": "hi"}]}
    anonymous = httpx.post(guarded.base_url + "/v1/chat/completions", json=body)
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"] == "Bearer"
    assert anonymous.json()["error"]["code"] == "unauthorized"
    with pytest.raises(openai.AuthenticationError):
        sdk(guarded, token="wrong").models.list()
    assert model_server.model.requests == []
    assert session_count(guarded) == 0


def test_a_server_without_a_token_takes_any_key(api: RunningServer, model_server: ScriptedModelServer) -> None:
    model_server.script("root", rlm_step("Answer.", "SUBMIT(answer='hello')"))
    completion = sdk(api, token="anything").chat.completions.create(
        model="fleet-rlm", messages=[{"role": "user", "content": "hi"}]
    )
    assert completion.choices[0].message.content == "hello"


def test_unknown_model_and_bad_requests_get_openai_errors(
    guarded: RunningServer, model_server: ScriptedModelServer
) -> None:
    client = sdk(guarded)
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert missing.value.code == "model_not_found" and "fleet-rlm/direct" in missing.value.message
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="fleet-rlm/turbo", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError) as last:
        client.chat.completions.create(
            model="fleet-rlm",
            messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        )
    assert last.value.code == "invalid_messages" and "messages.1" in last.value.message
    with pytest.raises(openai.BadRequestError) as image:
        client.chat.completions.create(
            model="fleet-rlm",
            messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}],
        )
    assert image.value.code == "unsupported_content"
    with pytest.raises(openai.UnprocessableEntityError) as empty:
        client.chat.completions.create(model="fleet-rlm", messages=[])
    assert empty.value.code == "invalid_request" and "messages" in empty.value.message
    with pytest.raises(openai.BadRequestError) as blank:
        client.chat.completions.create(model="fleet-rlm", messages=[{"role": "user", "content": "   "}])
    assert blank.value.code == "invalid_messages"
    assert model_server.model.requests == []
    assert session_count(guarded) == 0


def test_a_stream_closed_by_its_client_cancels_the_turn(
    guarded: RunningServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Slow.", SLOW))
    client = sdk(guarded)
    with client.chat.completions.with_streaming_response.create(
        model="fleet-rlm",
        messages=[{"role": "user", "content": "Take your time."}],
        stream=True,
        extra_headers={"X-Fleet-Session": "slow"},
    ) as response:
        turn_id = response.headers["x-fleet-turn"]
        for chunk in response.parse():
            extra = chunk.choices[0].delta.model_extra if chunk.choices else None
            if extra and "started" in (extra.get("reasoning_content") or ""):
                break
    assert wait_for_status(guarded, turn_id, {"cancelled", "completed", "failed"}) == "cancelled"


def test_a_waiting_client_that_leaves_cancels_the_turn(
    guarded: RunningServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Slow.", SLOW))
    client = sdk(guarded, timeout=3.0)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(
            model="fleet-rlm",
            messages=[{"role": "user", "content": "Take your time."}],
            extra_headers={"X-Fleet-Session": "slow"},
        )
    with fleet(guarded) as http:
        turn_id = http.get("/sessions/slow/turns").json()["items"][0]["id"]
    assert wait_for_status(guarded, turn_id, {"cancelled", "completed", "failed"}) == "cancelled"


def test_a_busy_session_and_a_failed_turn(guarded: RunningServer, model_server: ScriptedModelServer) -> None:
    model_server.script("root", rlm_step("Slow.", SLOW))
    client = sdk(guarded)
    with client.chat.completions.with_streaming_response.create(
        model="fleet-rlm", messages=[{"role": "user", "content": "Slow."}], stream=True, user="busy"
    ) as response:
        with pytest.raises(openai.ConflictError) as busy:
            client.chat.completions.create(
                model="fleet-rlm", messages=[{"role": "user", "content": "Me too."}], user="busy"
            )
        assert busy.value.code == "turn_in_progress"
        turn_id = response.headers["x-fleet-turn"]
    wait_for_status(guarded, turn_id, {"cancelled"})
    # A turn that ends without an answer is an error the SDK does not retry (the model is called once).
    model_server.script("root", Reply(status=500, text="the provider is down"))
    with pytest.raises(openai.InternalServerError) as failed:
        client.chat.completions.create(model="fleet-rlm/rlm", messages=[{"role": "user", "content": "Fail."}])
    assert failed.value.code == "turn_failed"
    assert failed.value.response.headers["x-should-retry"] == "false"
    assert len([r for r in model_server.model.requests if r.get("model") == "root"]) == 2
