"""A turn's end as every database can store it: no NUL character (U+0000) in any text.

PostgreSQL refuses U+0000 in text and JSONB columns (SQLite stores it). What a turn ends with (its
answer, an error message, artifact entries) comes from the model and the sandbox, which may write
anything: a NUL there failed the turn's final commit on every retry, leaving the turn ``running``
and its session blocked until a restart. It is replaced with U+FFFD, the replacement character, on
both databases, in the stored turn and in its terminal event alike. (Client input with a NUL is
refused at the API instead: docs/api.md.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fleet_rlm.engine.turn import TurnOutcome
from fleet_rlm.protocol.events import Event

NUL = "\x00"
REPLACEMENT = "\ufffd"


def without_nul(value: Any) -> Any:
    """``value`` (text or JSON) with every NUL in its strings and keys replaced."""
    if isinstance(value, str):
        return value.replace(NUL, REPLACEMENT)
    if isinstance(value, dict):
        return {without_nul(key): without_nul(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [without_nul(inner) for inner in value]
    return value


def make_storable(outcome: TurnOutcome, terminal: Event) -> Event:
    """Scrub ``outcome`` in place; returns ``terminal`` scrubbed the same way."""
    outcome.answer = without_nul(outcome.answer)
    outcome.error = without_nul(outcome.error)
    outcome.unverified_reason = without_nul(outcome.unverified_reason)
    outcome.usage = without_nul(outcome.usage)
    outcome.artifacts = without_nul(outcome.artifacts)
    outcome.evidence = without_nul(outcome.evidence)
    return dataclasses.replace(terminal, data=without_nul(terminal.data))
