"""Every event as a pydantic model, one discriminated union of them, and its JSON Schema.

``TURN_EVENT`` validates an event as it is on the wire (``Event.to_dict()``, or one SSE ``data:``
line, heartbeats included). ``uv run python -m fleet_rlm.protocol.schema`` rewrites
docs/events.schema.json; the OpenAPI document publishes the same schemas as components.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from fleet_rlm.protocol.events import SCHEMA_VERSION, EventType
from fleet_rlm.protocol.payloads import PAYLOADS, Payload

DOCUMENT = Path(__file__).resolve().parents[3] / "docs" / "events.schema.json"
UNION_NAME = "TurnEvent"
_STRICT = ConfigDict(extra="forbid", strict=True)
_OPTIONAL_STR: Any = str | None


class HeartbeatEvent(BaseModel):
    """Sent by servers on a quiet stream (without `id:`, so it never moves `Last-Event-ID`); never stored"""

    model_config = _STRICT

    type: Literal["heartbeat"]
    ts: float = Field(description="when it was sent, seconds since the epoch")


def _event_model(payload: type[Payload]) -> type[BaseModel]:
    kind: Any = Literal[payload.event_type.value]
    return create_model(
        f"{payload.__name__}Event",
        __config__=_STRICT,
        __doc__=f"The `{payload.event_type.value}` event.",
        type=(kind, ...),
        seq=(int, Field(ge=1, description="starts at 1 and only grows within a turn; the SSE `id:`")),
        turn_id=(str, ...),
        ts=(float, Field(description="when it was emitted, seconds since the epoch")),
        span_id=(str, ...),
        parent_span_id=(_OPTIONAL_STR, Field(description="null for the turn's root span")),
        data=(payload, ...),
    )


EVENT_MODELS: dict[EventType, type[BaseModel]] = {payload.event_type: _event_model(payload) for payload in PAYLOADS}
EVENT_MODELS[EventType.HEARTBEAT] = HeartbeatEvent

_ANY_EVENT: Any = Annotated[Union[tuple(EVENT_MODELS.values())], Field(discriminator="type")]  # noqa: UP007
TURN_EVENT: TypeAdapter[BaseModel] = TypeAdapter(_ANY_EVENT)


def validate_event(raw: dict[str, Any]) -> BaseModel:
    """``raw`` as its event model; raises ``pydantic.ValidationError`` when it breaks the protocol."""
    return TURN_EVENT.validate_python(raw)


def component_schemas(ref_template: str = "#/components/schemas/{model}") -> dict[str, Any]:
    """Every event's schema by name, plus ``TurnEvent`` (any one of them), with refs to each other."""
    schema = TURN_EVENT.json_schema(ref_template=ref_template)
    components: dict[str, Any] = schema.pop("$defs")
    schema["description"] = (
        f"One event of a turn (schema version {SCHEMA_VERSION}): what each `data:` line of the event stream "
        "holds. `type` tells which; see docs/events.md."
    )
    components[UNION_NAME] = schema
    return components


def document() -> dict[str, Any]:
    """The standalone JSON Schema of an event, as docs/events.schema.json holds it."""
    definitions = component_schemas("#/$defs/{model}")
    root = definitions.pop(UNION_NAME)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": UNION_NAME,
        "x-schema-version": SCHEMA_VERSION,
        **root,
        "$defs": definitions,
    }


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    target = Path(argv[0]) if argv else DOCUMENT
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
