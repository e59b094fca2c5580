from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from fleet_rlm.protocol.schema import DOCUMENT, validate_event

PUBLISHED = Draft202012Validator(json.loads(DOCUMENT.read_text(encoding="utf-8")))


def schema_errors(raw: dict[str, Any]) -> list[str]:
    """Why ``raw`` breaks the published schema (docs/events.schema.json), and the protocol's models."""
    errors = [error.message for error in PUBLISHED.iter_errors(raw)]
    try:
        validate_event(raw)
    except ValueError as exc:  # pydantic's ValidationError
        errors.append(str(exc))
    return errors


def sse_frames(lines: Iterable[str]) -> Iterator[dict[str, str]]:
    """The frames of an event stream as the wire has them (field name -> value; comments dropped)."""
    frame: dict[str, str] = {}
    for line in lines:
        if not line:
            if frame:
                yield frame
            frame = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            frame[name] = value.removeprefix(" ")
    if frame:
        yield frame


@pytest.fixture
def settings_defaults(tmp_path: Path) -> dict[str, Any]:
    """What this directory's ``make_settings`` sets before a test's own overrides."""
    return {
        "database_url": f"sqlite+aiosqlite:///{tmp_path / 'fleet.db'}",
        "sandbox_pool_size": 0,
        "sse_heartbeat_seconds": 0.2,
    }
