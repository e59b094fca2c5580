"""The committed documents the protocol generates are current."""

from __future__ import annotations

import json

from fleet_rlm.api.openapi import openapi_document
from fleet_rlm.protocol import docs, schema
from fleet_rlm.protocol.events import SCHEMA_VERSION, EventType


def test_committed_event_schema_matches_the_code() -> None:
    assert schema.DOCUMENT.read_text(encoding="utf-8") == schema.render(), (
        "docs/events.schema.json is out of date: run `uv run python -m fleet_rlm.protocol.schema` and commit it"
    )


def test_committed_events_doc_matches_the_code() -> None:
    text = docs.DOCUMENT.read_text(encoding="utf-8")
    assert docs.render(text) == text, (
        "docs/events.md is out of date: run `uv run python -m fleet_rlm.protocol.docs` and commit it"
    )


def test_the_events_doc_names_every_event_type_and_the_schema_version() -> None:
    text = docs.DOCUMENT.read_text(encoding="utf-8")
    assert all(f"| `{kind.value}` |" in text for kind in EventType)
    assert f"(currently `{SCHEMA_VERSION}`)" in text


def test_the_openapi_document_publishes_every_event_and_the_stream_refers_to_them() -> None:
    document = openapi_document()
    components = document["components"]["schemas"]
    union = components[schema.UNION_NAME]
    assert set(union["discriminator"]["mapping"]) == {kind.value for kind in EventType}
    assert all(ref["$ref"].removeprefix("#/components/schemas/") in components for ref in union["oneOf"])
    stream = document["paths"]["/api/v1/turns/{turn_id}/events"]["get"]["responses"]["200"]["content"]
    item = stream["text/event-stream"]["itemSchema"]
    assert item["properties"]["data"]["contentSchema"] == {"$ref": f"#/components/schemas/{schema.UNION_NAME}"}
    assert json.dumps(components).count('"$ref": "#/$defs/') == 0
