"""``remember(text, why)``: the host tool a turn's code proposes memory entries with.

The turn only proposes: whoever runs it (the service) checks and stores each proposal for the
person to review, and only approved entries reach later turns (docs/memory.md). The arguments come
from sandbox code and are hostile; :class:`ProposeMemory` implementations check them and refuse
with :class:`MemoryRefused`, whose message goes back to the code as Fleet's refusal. Child agents
get no ``remember``: they report to the turn, which may remember what they found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from fleet_rlm.config import MemorySettings
from fleet_rlm.engine.bridge.facade import refused
from fleet_rlm.engine.observe import TurnTrace
from fleet_rlm.protocol.payloads import MemoryProposed

ProposalOutcome = Literal["proposed", "already_pending", "already_approved", "already_rejected"]

_REPLIES: dict[ProposalOutcome, str] = {
    "proposed": "proposed as {id}: the person reviews it; once approved, later turns see it in memory/MEMORIES.md",
    "already_pending": "already proposed as {id}, waiting for the person's review",
    "already_approved": "already in memory as {id} (approved)",
    "already_rejected": "the person rejected this before ({id}); do not propose it again",
}


class MemoryRefused(Exception):
    """A proposal not taken; the message says why, for the sandbox code."""


@dataclass(frozen=True)
class Proposal:
    """What became of one ``remember`` call: the entry it names, as stored (text cleaned)."""

    entry_id: str
    text: str
    why: str
    outcome: ProposalOutcome


class ProposeMemory(Protocol):
    """Checks and stores one proposal; called on a tool thread. Raises :class:`MemoryRefused`."""

    def __call__(self, text: str, why: str) -> Proposal: ...


def memory_tools(propose: ProposeMemory, settings: MemorySettings, trace: TurnTrace) -> list[Callable[..., Any]]:
    """``[remember]`` for a turn's own loop, or nothing when turns may not propose."""
    if settings.max_proposals_per_turn == 0:
        return []

    def remember(text: str, why: str) -> str:
        try:
            proposal = propose(text, why)
        except MemoryRefused as exc:
            raise refused(f"remember: {exc}") from None
        if proposal.outcome == "proposed":
            trace.emit_in_iteration(MemoryProposed(entry_id=proposal.entry_id, text=proposal.text, why=proposal.why))
        return _REPLIES[proposal.outcome].format(id=proposal.entry_id)

    remember.__doc__ = (
        "Propose a note for Fleet's long-term memory, shared by later turns and sessions: `text` is one "
        f"fact, preference or lesson worth knowing next time (at most {settings.max_entry_chars} characters), "
        "`why` says briefly what it rests on. The person reviews every proposal; only approved notes reach "
        f"later turns (in memory/MEMORIES.md). At most {settings.max_proposals_per_turn} per turn. "
        "Returns what became of it."
    )
    return [remember]
