"""The program a turn is served: the newest approved optimization, or Fleet's built-in program."""

from __future__ import annotations

import json

from fleet_rlm.engine.program import ProgramSpec
from fleet_rlm.store import ProgramRecord, Store


def program_of(record: ProgramRecord) -> ProgramSpec:
    """The program a stored record holds (its content is the canonical JSON its sha256 covers)."""
    content = json.loads(record.content)
    return ProgramSpec(
        version=record.version,
        generate_action=content.get("generate_action"),
        extract=content.get("extract"),
        flex_module_src=content.get("flex_module_src"),
    )


async def served_program(store: Store) -> ProgramSpec:
    """What the next turn runs."""
    record = await store.active_program()
    return ProgramSpec() if record is None else program_of(record)
