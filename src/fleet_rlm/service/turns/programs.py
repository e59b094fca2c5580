"""The program a turn is served: the newest approved optimization, or Fleet's built-in program."""

from __future__ import annotations

import json

from fleet_rlm.engine.program import ProgramSpec
from fleet_rlm.protocol.ids import BUILTIN_PROGRAM_VERSION
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


def program_or_builtin(record: ProgramRecord | None) -> ProgramSpec:
    return ProgramSpec() if record is None else program_of(record)


async def served_program(store: Store) -> ProgramSpec:
    """What the next turn runs."""
    return program_or_builtin(await store.active_program())


async def program_of_turn(store: Store, turn_id: str) -> ProgramSpec:
    """The program a started turn runs: the version stored when it was marked running."""
    version = (await store.get_turn(turn_id)).program_version
    if version is None or version == BUILTIN_PROGRAM_VERSION:
        return ProgramSpec()
    return program_of(await store.get_program(version))
