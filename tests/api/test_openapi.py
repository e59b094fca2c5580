from __future__ import annotations

import json

from fleet_rlm.api.openapi import DOCUMENT, openapi_document


def test_committed_openapi_document_matches_the_code() -> None:
    committed = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    assert committed == openapi_document(), (
        "docs/openapi.json is out of date: run `uv run python -m fleet_rlm.api.openapi` and commit it"
    )


def test_every_route_is_under_api_v1_and_documents_its_errors() -> None:
    document = openapi_document()
    assert all(path.startswith("/api/v1/") for path in document["paths"])
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
