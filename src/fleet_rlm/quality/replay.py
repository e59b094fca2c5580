"""Running a captured turn again: a fresh, disposable runtime (a sandbox workspace from the pool)
restored from the turn's snapshot, its input files put back by sha256, then thrown away.

A replay is not a turn of the session: nothing it does is stored, its memory proposals go nowhere,
and its artifacts are read back (bounded, through the workspace's safe tree, never following a link)
only for the label's checks.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from fleet_rlm.config import Settings
from fleet_rlm.engine.program import ProgramSpec
from fleet_rlm.engine.turn import TurnOutcome, build_turn
from fleet_rlm.protocol.events import Event
from fleet_rlm.service.quality_data import ReplayUnavailable as ReplayUnavailable
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.replays import ReplaySnapshot

MAX_ARTIFACT_BYTES = 1024 * 1024
"""Bytes of an artifact read back for its content checks; a larger one is checked as absent text."""


@dataclass
class ReplayResult:
    """What a replay produced: the outcome and the text of its artifacts."""

    outcome: TurnOutcome
    artifacts: dict[str, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)

    @property
    def answer(self) -> str | None:
        return self.outcome.answer

    @property
    def route(self) -> str | None:
        return self.outcome.route

    @property
    def usage(self) -> dict[str, Any]:
        return self.outcome.usage

    @property
    def unverified_reason(self) -> str | None:
        return self.outcome.unverified_reason


async def replay(
    service: FleetService,
    snapshot: ReplaySnapshot,
    *,
    settings: Settings | None = None,
    program: ProgramSpec | None = None,
) -> ReplayResult:
    """Run ``snapshot`` again with ``settings`` (the service's, with the turn's overrides, by default)
    and ``program`` (the one serving now by default)."""
    settings = snapshot.settings_for(settings or service.settings)
    program = program or await service.quality.serving()
    events: list[Event] = []
    async with service.quality.replay_sandbox(snapshot) as (replay_id, lease):
        request = snapshot.request(lease.workspace.root, replay_id)
        request.program = program
        outcome = await build_turn(settings, request, events.append, backend=lease.backend).run()
        artifacts = await asyncio.to_thread(_read_artifacts, lease.workspace.tree, outcome)
    return ReplayResult(outcome=outcome, artifacts=artifacts, events=events)


def _read_artifacts(tree: Any, outcome: TurnOutcome) -> dict[str, str]:
    texts: dict[str, str] = {}
    for record in outcome.artifacts:
        path = str(record["path"])
        try:
            data = tree.read_bytes(path, MAX_ARTIFACT_BYTES)
        except (OSError, ValueError):
            continue
        texts[path] = data.decode("utf-8", errors="replace")
    return texts
