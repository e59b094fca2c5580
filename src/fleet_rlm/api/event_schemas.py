"""What the OpenAPI document says about a turn's event stream: every event's JSON Schema as a
component, and the stream's response referring to it (see docs/events.md)."""

from __future__ import annotations

from typing import Any

from fleet_rlm.protocol.schema import UNION_NAME, component_schemas

EVENT_REF = f"#/components/schemas/{UNION_NAME}"

EVENT_STREAM_RESPONSE: dict[str, Any] = {
    "description": (
        "Server-sent events. Each event has `id:` (its `seq`), `event:` (its `type`) and one `data:` line "
        f"holding the event as JSON ({UNION_NAME}); heartbeats have no `id:`. The stream ends after the "
        "terminal event."
    ),
    "content": {
        "text/event-stream": {
            # OpenAPI 3.2's form for sequential media types, as FastAPI writes it for its own SSE routes.
            "itemSchema": {
                "type": "object",
                "required": ["data"],
                "properties": {
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": {"$ref": EVENT_REF},
                    },
                    "event": {"type": "string", "description": "the event's `type`"},
                    "id": {"type": "string", "description": "the event's `seq`; absent on heartbeats"},
                    "retry": {"type": "integer", "minimum": 0},
                },
            }
        }
    },
}


def add_event_schemas(document: dict[str, Any]) -> dict[str, Any]:
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in component_schemas().items():
        if schemas.get(name, schema) != schema:
            raise ValueError(f"the OpenAPI component {name!r} is both an API body and an event schema")
        schemas[name] = schema
    return document
