"""Reviewed memory: what turns propose, what the person decides, and what later turns are shown.

One memory serves every session of a server (its database): a turn proposes entries with
``remember(text, why)``, each stored at once as ``pending`` with the session and turn it came from;
the person approves (possibly after editing), rejects or deletes each one; approved entries are
rendered into every later turn's ``memory/MEMORIES.md``, newest kept when they exceed
``memory.max_chars``. Texts come from sandbox code or API clients and are checked here, in one place
(:func:`check_text`). See docs/memory.md.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from fleet_rlm.config import MemorySettings
from fleet_rlm.engine.memory import MemoryRefused, Proposal, ProposalOutcome
from fleet_rlm.protocol.visible import hidden_character, show_hidden
from fleet_rlm.store import Conflict, Invalid, MemoryRecord, NotFound, Store

MEMORY_FILE = "memory/MEMORIES.md"
MAX_WHY_CHARS = 500
PROPOSAL_WAIT_SECONDS = 30.0
_ENTRY_ID = re.compile(r"mem_[0-9a-f]{16}")
_SHOWN_ID_CHARS = 64
_OUTCOME_OF_STATUS: dict[str, ProposalOutcome] = {
    "pending": "already_pending",
    "approved": "already_approved",
    "rejected": "already_rejected",
}


class BadMemoryText(Invalid):
    code = "invalid_memory_text"


def check_text(value: object, *, what: str, limit: int, allow_empty: bool = False) -> str:
    """``value`` as memory text: line breaks made ``\\n``, trimmed, at most ``limit`` characters, valid
    Unicode, and nothing a reviewer would not see as itself (:func:`hidden_character`: controls but
    line breaks and tabs, bidi, zero-width, tag and private-use characters, ...), so the text the
    person approves is the text later turns read. Raises :class:`BadMemoryText`."""
    if not isinstance(value, str):
        raise BadMemoryText(f"{what} must be a string, not {type(value).__name__}")
    text = value.replace("\r\n", "\n").replace("\r", "\n").strip()
    if len(text) > limit:
        raise BadMemoryText(f"{what} is {len(text)} characters long; the most is {limit}")
    if not text and not allow_empty:
        raise BadMemoryText(f"{what} is empty")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadMemoryText(f"{what} is not valid Unicode (it holds a lone surrogate)") from None
    hidden = hidden_character(value, allowed="\n\r\t")
    if hidden is not None:
        raise BadMemoryText(
            f"{what} contains {hidden.describe()}; only visible characters, line breaks and tabs are "
            "allowed, so that the reviewer sees all later turns will read"
        )
    return text


def render_memories(entries: Sequence[MemoryRecord], max_chars: int) -> str | None:
    """``memory/MEMORIES.md`` for approved ``entries`` (oldest first): the newest entries whose text
    fits in ``max_chars``, with a note on how many older ones are left out; None without entries.
    A character an entry approved before today's checks holds, hidden from its reviewer, is escaped."""
    if not entries:
        return None
    shown: list[str] = []
    used = 0
    for entry in reversed(entries):
        block = "- " + show_hidden(entry.text).replace("\n", "\n  ")
        if used + len(block) > max_chars:
            break
        shown.append(block)
        used += len(block) + 1
    lines = [
        "# Memory",
        "",
        "What the person approved to remember from earlier turns and sessions, oldest first.",
    ]
    left_out = len(entries) - len(shown)
    if left_out:
        lines.append(
            f"{left_out} older {'entry is' if left_out == 1 else 'entries are'} not shown "
            f"(memory.max_chars is {max_chars})."
        )
    return "\n".join([*lines, "", *reversed(shown)]) + "\n"


def check_entry_id(entry_id: str) -> str:
    """An id of the form Fleet gives entries; anything else is simply not found."""
    if not _ENTRY_ID.fullmatch(entry_id):
        raise NotFound("memory", entry_id[:_SHOWN_ID_CHARS])
    return entry_id


@dataclass
class MemoryBook:
    """The service's memory: reviews for the API and ``fleet chat``, proposals and context for turns."""

    store: Store
    settings: MemorySettings

    def check_entry(self, text: object) -> str:
        return check_text(text, what="text", limit=self.settings.max_entry_chars)

    async def entries(
        self, *, status: str | None = None, session: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[MemoryRecord]:
        """Entries, oldest proposal first; of ``status`` only, or proposed in ``session`` (id or name) only."""
        session_id = None if session is None else (await self.store.get_session(session)).id
        return await self.store.list_memories(status=status, session_id=session_id, limit=limit, offset=offset)

    async def get(self, entry_id: str) -> MemoryRecord:
        return await self.store.get_memory(check_entry_id(entry_id))

    async def approve(self, entry_id: str, text: str | None = None) -> MemoryRecord:
        """Approve the entry, with ``text`` in place of its own when the person edited it. Its own text
        must pass today's checks: one stored before a rule must be approved edited."""
        check_entry_id(entry_id)
        if text is None:
            try:
                self.check_entry((await self.store.get_memory(entry_id)).text)
            except BadMemoryText as exc:
                raise BadMemoryText(f"{exc.message}; approve it with the text edited") from None
        edited = None if text is None else self.check_entry(text)
        return await self.store.review_memory(entry_id, "approved", text=edited)

    async def reject(self, entry_id: str) -> MemoryRecord:
        return await self.store.review_memory(check_entry_id(entry_id), "rejected")

    async def delete(self, entry_id: str) -> MemoryRecord:
        return await self.store.delete_memory(check_entry_id(entry_id))

    async def context(self) -> str | None:
        """What the next turn is shown: ``memory/MEMORIES.md``'s text, or None while nothing is approved."""
        return render_memories(await self.store.approved_memories(), self.settings.max_chars)

    def proposals_for(self, session_id: str, turn_id: str, loop: asyncio.AbstractEventLoop) -> TurnProposals:
        return TurnProposals(self, session_id, turn_id, loop)


@dataclass
class TurnProposals:
    """One turn's ``remember``: checks each call and stores it (on the service's loop) at once."""

    book: MemoryBook
    session_id: str
    turn_id: str
    loop: asyncio.AbstractEventLoop
    made: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, text: str, why: str) -> Proposal:
        settings = self.book.settings
        try:
            entry = self.book.check_entry(text)
            reason = check_text(why, what="why", limit=MAX_WHY_CHARS, allow_empty=True)
        except BadMemoryText as exc:
            raise MemoryRefused(exc.message) from None
        with self._lock:
            if self.made >= settings.max_proposals_per_turn:
                raise MemoryRefused(
                    f"this turn already made {self.made} proposals, the most one turn may make "
                    "(memory.max_proposals_per_turn)"
                )
            self.made += 1
        stored = asyncio.run_coroutine_threadsafe(
            self.book.store.propose_memory(
                entry,
                reason,
                session_id=self.session_id,
                turn_id=self.turn_id,
                max_pending=settings.max_pending,
            ),
            self.loop,
        )
        try:
            record, created = stored.result(PROPOSAL_WAIT_SECONDS)
        except Conflict as exc:
            raise MemoryRefused(f"{exc.message}; ask the person to review them (/memory in fleet chat)") from None
        except BaseException:
            stored.cancel()
            raise
        outcome: ProposalOutcome = "proposed" if created else _OUTCOME_OF_STATUS[record.status]
        return Proposal(entry_id=record.id, text=record.text, why=record.why, outcome=outcome)
