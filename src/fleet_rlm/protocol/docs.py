"""The generated parts of docs/events.md: ``uv run python -m fleet_rlm.protocol.docs`` rewrites them.

The prose around them is written by hand; each generated part sits between ``<!-- BEGIN name -->``
and ``<!-- END name -->`` and is rebuilt from the payload models, so the tables cannot drift from
what the code emits.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from fleet_rlm.protocol.events import EventType
from fleet_rlm.protocol.payloads import PAYLOADS, NoUsage, Payload, Usage
from fleet_rlm.protocol.schema import HeartbeatEvent
from fleet_rlm.protocol.status import STATUS_MEANINGS, TurnStatus

DOCUMENT = Path(__file__).resolve().parents[3] / "docs" / "events.md"
_PART = re.compile(r"(<!-- BEGIN (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- END (?P=name) -->)", re.DOTALL)


class StaleDocument(ValueError):
    """The document lacks a part this generator writes."""


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation is made of (``X``, ``X | None``, ``list[X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (Union, types.UnionType, list):
        return [model for arg in get_args(annotation) for model in _models_in(arg)]
    return []


def _literal_values(annotation: Any) -> list[str]:
    if get_origin(annotation) is Literal:
        return [str(value) for value in get_args(annotation)]
    if get_origin(annotation) in (Union, types.UnionType):
        return [value for arg in get_args(annotation) for value in _literal_values(arg)]
    return []


def _field(name: str, info: FieldInfo) -> str:
    text = f"`{info.alias or name}`"
    if info.description:
        return f"{text} ({info.description})"
    values = _literal_values(info.annotation)
    if values:
        return f"{text} ({', '.join(f'`{value}`' for value in values)})"
    models = [model for model in _models_in(info.annotation) if model is not NoUsage]
    if models == [Usage]:
        return f"{text} (see below)"
    if len(models) == 1 and models[0].model_fields:
        return f"{text} ({', '.join(_field(n, i) for n, i in models[0].model_fields.items())})"
    return text


def _data(payload: type[Payload]) -> str:
    fields = ", ".join(_field(name, info) for name, info in payload.model_fields.items())
    return f"{fields}: {payload.summary}" if payload.summary else fields


def events_table() -> str:
    rows = ["| type | span | data |", "|---|---|---|"]
    rows += [f"| `{p.event_type.value}` | {p.span} | {_data(p)} |" for p in PAYLOADS]
    heartbeat = (HeartbeatEvent.__doc__ or "").strip()
    rows.append(
        f"| `{EventType.HEARTBEAT.value}` | — | `ts` only, no `seq` or span: {heartbeat[0].lower()}{heartbeat[1:]} |"
    )
    return "\n".join(rows) + "\n"


def usage_table() -> str:
    rows = ["| field | meaning |", "|---|---|"]
    rows += [f"| `{name}` | {info.description or ''} |" for name, info in Usage.model_fields.items()]
    empty = (NoUsage.__doc__ or "").strip()
    return "\n".join(rows) + f"\n\n`usage` of `turn.failed`, `turn.cancelled` and `turn.interrupted` may be {empty}\n"


def statuses_table() -> str:
    rows = ["| status | meaning | ends with |", "|---|---|---|"]
    for status in TurnStatus:
        ends = f"`{status.terminal_event.value}`" if not status.active else "—"
        rows.append(f"| `{status.value}` | {STATUS_MEANINGS[status]} | {ends} |")
    return "\n".join(rows) + "\n"


PARTS: dict[str, Callable[[], str]] = {"events": events_table, "usage": usage_table, "statuses": statuses_table}


def render(text: str) -> str:
    """``text`` with every generated part rebuilt."""
    found = {match["name"] for match in _PART.finditer(text)}
    missing, unknown = sorted(set(PARTS) - found), sorted(found - set(PARTS))
    if missing or unknown:
        raise StaleDocument(
            f"docs/events.md must hold exactly the parts {', '.join(PARTS)} "
            f"(<!-- BEGIN name --> ... <!-- END name -->); missing: {missing}, unknown: {unknown}"
        )
    return _PART.sub(lambda m: m[1] + PARTS[m["name"]]() + m[4], text)


def main(argv: list[str] | None = None) -> int:
    target = Path(argv[0]) if argv else DOCUMENT
    target.write_text(render(target.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
