from __future__ import annotations

import json

import httpx

from fleet_rlm.api.openapi import DOCUMENT, openapi_document

from .server import RunningServer


def test_committed_openapi_document_matches_the_code() -> None:
    committed = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    assert committed == openapi_document(), (
        "docs/openapi.json is out of date: run `uv run python -m fleet_rlm.api.openapi` and commit it"
    )


def test_every_route_is_under_api_v1_and_documents_its_errors() -> None:
    """Fleet's own API is under /api/v1; the OpenAI-compatible one under /v1, where OpenAI clients look."""
    document = openapi_document()
    assert all(path.startswith("/api/v1/") for path in document["paths"] if not path.startswith("/v1/"))
    assert {path for path in document["paths"] if path.startswith("/v1/")} == {"/v1/models", "/v1/chat/completions"}
    for path in ("/api/v1/sessions/{session}", "/api/v1/turns/{turn_id}", "/api/v1/turns/{turn_id}/events"):
        operations = document["paths"][path]
        assert any("404" in op["responses"] for op in operations.values()), path


def test_every_operation_documents_the_shared_rules() -> None:
    document = openapi_document()
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            codes = set(operation["responses"])
            assert {"401", "413", "421"} <= codes, (method, path)
            if method in ("post", "put", "patch", "delete"):
                assert "403" in codes, (method, path)
    events = document["paths"]["/api/v1/turns/{turn_id}/events"]["get"]
    assert "ticket" in {p["name"] for p in events["parameters"]}
    assert "201" in document["paths"]["/api/v1/turns/{turn_id}/events/ticket"]["post"]["responses"]
    assert {"413", "422"} <= set(document["paths"]["/api/v1/sessions/import"]["post"]["responses"])


def test_errors_are_documented_as_the_body_the_server_sends() -> None:
    """``{"code", "message"}``, or OpenAI's shape on the OpenAI-compatible routes."""
    document = openapi_document()
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for path, operations in document["paths"].items():
        body = "OpenAIErrorBody" if path.startswith("/v1/") else "ErrorBody"
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if (status.startswith("4") or status == "500") and "content" in response:
                    assert response["content"]["application/json"]["schema"] == {
                        "$ref": f"#/components/schemas/{body}"
                    }, (method, path, status)
            if "application/json" in operation.get("requestBody", {}).get("content", {}):
                assert "malformed_json" in operation["responses"]["400"]["description"], (method, path)


def test_every_integer_parameter_has_a_documented_maximum() -> None:
    for operations in openapi_document()["paths"].values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                schema = parameter["schema"]
                for option in schema.get("anyOf", [schema]):
                    if option.get("type") == "integer":
                        assert "maximum" in option, parameter


def test_options_answers_405_naming_exactly_the_documented_methods(api: RunningServer) -> None:
    """``Allow`` lists every method of the path, not only those of the first route that matched it."""
    examples = {"{session}": "s", "{path}": "files/a.txt", "{turn_id}": "turn_x"}
    with httpx.Client(base_url=api.base_url, timeout=30) as http:
        for template, operations in openapi_document()["paths"].items():
            path = template
            for name, value in examples.items():
                path = path.replace(name, value)
            for method in ("OPTIONS", "PUT", "HEAD", "TRACE"):
                if method.lower() in operations:
                    continue
                answer = http.request(method, path)
                assert answer.status_code == 405, (method, template)
                allowed = {m.strip().lower() for m in answer.headers["allow"].split(",")}
                assert allowed == set(operations), (method, template, answer.headers["allow"])


def test_sessions_import_is_its_own_path_not_a_session_named_import(api: RunningServer) -> None:
    with api.http() as http:
        refused = http.post("/sessions", json={"name": "import"})
        assert refused.status_code == 400 and refused.json()["code"] == "invalid_session_name"
        for method in ("GET", "PATCH", "DELETE", "OPTIONS"):
            answer = http.request(method, "/sessions/import")
            assert answer.status_code == 405 and answer.headers["allow"] == "POST", method


def test_every_link_names_an_operation_of_the_document() -> None:
    document = openapi_document()
    operations = {op["operationId"] for ops in document["paths"].values() for op in ops.values()}
    links = [
        link
        for ops in document["paths"].values()
        for op in ops.values()
        for response in op["responses"].values()
        for link in response.get("links", {}).values()
    ]
    assert links and all(link["operationId"] in operations for link in links)
