"""Whether an endpoint honours a JSON schema in ``response_format``: the probe against real HTTP servers
that refuse, ignore or honour the field, and what is kept of the answer."""

from __future__ import annotations

import json

from fleet_rlm.config import LMSettings
from fleet_rlm.models.scripted import Reply, ScriptedModel, ScriptedModelServer
from fleet_rlm.models.structured import probe_schema_support, schema_support


def settings(server: ScriptedModelServer) -> LMSettings:
    return LMSettings(model="openai/local", base_url=server.base_url, api_key="k")


def test_a_server_that_refuses_the_schema_is_found_not_to_honour_it_without_taking_a_reply() -> None:
    with ScriptedModelServer(ScriptedModel(json_schema="refuse")) as server:
        server.script("local", "kept for the turn")
        found = probe_schema_support(settings(server))
        assert server.model.remaining("local") == 1
    assert found.style is None and found.reached
    assert found.detail == "json_schema: refused (400); json_object_schema: refused (400)"


def test_a_server_that_ignores_the_schema_is_told_apart_by_its_reply() -> None:
    with ScriptedModelServer(ScriptedModel(json_schema="ignore")) as server:
        server.script("local", "Hello!", '{"greeting": "Hello!"}')
        found = probe_schema_support(settings(server))
    assert found.style is None and found.reached
    assert "ignored (the reply did not follow the schema)" in found.detail


def test_the_first_style_a_server_honours_is_the_one_used() -> None:
    with ScriptedModelServer(ScriptedModel(json_schema="honour")) as server:
        server.script("local", '{"ok": true}')
        found = probe_schema_support(settings(server))
        (request,) = server.model.requests_for("local")
    assert found.style == "json_schema"
    assert request["response_format"]["type"] == "json_schema"
    assert request["response_format"]["json_schema"]["schema"]["required"] == ["ok"]
    assert request["max_tokens"] <= 16 and request["messages"][0]["content"] == "Say hello."


def test_a_server_honouring_only_llama_cpp_pythons_style_is_asked_in_that_style() -> None:
    def llama_cpp_python(request: dict[str, object]) -> str | Reply:
        form = request["response_format"]
        assert isinstance(form, dict)
        # llama-cpp-python's server validates the type: "json_schema" is not one it knows.
        return '{"ok": false}' if form["type"] == "json_object" else Reply(status=422, text="type: json_schema")

    with ScriptedModelServer(ScriptedModel(json_schema="honour", default=llama_cpp_python)) as server:
        found = probe_schema_support(settings(server))
    assert found.style == "json_object_schema"
    assert found.detail == "json_object_schema: honoured"


def test_what_was_found_is_kept_per_endpoint_but_an_unreachable_one_is_asked_again() -> None:
    with ScriptedModelServer(ScriptedModel(json_schema="honour")) as server:
        lm = settings(server)
        server.script("local", Reply(status=503, text="loading"), Reply(status=503, text="loading"))
        assert not schema_support(lm).reached
        server.script("local", json.dumps({"ok": True}))
        assert schema_support(lm).style == "json_schema"
        assert schema_support(lm).style == "json_schema"
        assert len(server.model.requests_for("local")) == 3


def test_a_providers_default_endpoint_is_not_probed() -> None:
    found = schema_support(LMSettings(model="openai/gpt-4.1-mini"))
    assert (found.style, found.detail) == (None, "not probed: no base URL")
