"""What a Fleet process sends a turn process to run one turn."""

from __future__ import annotations

import dataclasses

from fleet_rlm.config import Settings
from fleet_rlm.engine.turn import TurnRequest


@dataclasses.dataclass(frozen=True)
class TurnOrder:
    """What the Fleet process sends to run one turn here."""

    settings: Settings
    request: TurnRequest
    """The turn's request, but for ``propose_memory`` (see ``remembers``)."""
    backend_name: str
    isolated: bool
    execution_instructions: str
    remembers: bool
    """Whether the turn gets ``remember`` (its proposals are checked and stored by the Fleet process)."""
