"""``/memory`` in ``fleet chat``: the entries turns proposed with ``remember``, and the person's review.

The list numbers entries waiting for review first, then the approved ones (each oldest first); an
action names an entry by that number (or by its id), looked up afresh, so proposals that arrive in
between do not shift the entries already listed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text

from fleet_rlm.clients.terminal.commands import CommandError, MemoryAction, parse_memory
from fleet_rlm.protocol.visible import show_hidden

if TYPE_CHECKING:
    from fleet_rlm.clients.terminal.actions import ChatState

HINT = "/memory approve N [TEXT] · edit N TEXT · reject N · forget N"


def _listed(state: ChatState) -> list[dict[str, Any]]:
    """Pending entries, then approved ones: the numbering of ``/memory``."""
    return state.client.memories(status="pending") + state.client.memories(status="approved")


def _origin(entry: dict[str, Any], names: dict[str, str], current: str) -> str:
    session = entry.get("session_id")
    if session is None:
        return "from a deleted session"
    if session == current:
        return "from this session"
    return f"from session {names.get(session, session)}"


def _shown(text: object) -> str:
    """An entry's text as the reviewer must see it: a hidden character stored before memory refused
    them is escaped (``\\u202e``), never passed to the terminal."""
    return show_hidden(str(text))


def _show(state: ChatState, number: int, entry: dict[str, Any], names: dict[str, str]) -> None:
    text = _shown(entry["text"]).replace("\n", "\n    ")
    state.console.print(Text(f"{number:>2}. {text}"))
    why = f"why: {_shown(entry['why'])} · " if entry.get("why") else ""
    state.say(f"    {why}{_origin(entry, names, state.session_id)}")


def show_memory(state: ChatState) -> None:
    entries = _listed(state)
    if not entries:
        state.say("no memory yet: turns propose entries with remember(), and they wait here for your review")
        return
    names = {s["id"]: s["name"] or s["id"] for s in state.client.sessions()}
    pending = [e for e in entries if e["status"] == "pending"]
    if pending:
        state.console.print(Text(f"waiting for your review ({len(pending)}):", style="bold"))
    for number, entry in enumerate(entries, start=1):
        if number == len(pending) + 1:
            state.console.print(Text(f"approved ({len(entries) - len(pending)}), shown to later turns:", style="bold"))
        _show(state, number, entry, names)
    state.say(HINT)


def _find(state: ChatState, action: MemoryAction) -> dict[str, Any]:
    entries = _listed(state)
    if action.ref.isdigit() and 1 <= int(action.ref) <= len(entries):
        return entries[int(action.ref) - 1]
    for entry in entries:
        if entry["id"] == action.ref:
            return entry
    span = f" (1..{len(entries)})" if entries else ""
    raise CommandError(f"/memory {action.action} {action.ref}: no such entry{span}; /memory lists them")


def do_memory(state: ChatState, args: tuple[str, ...]) -> None:
    action = parse_memory(args)
    if action is None:
        show_memory(state)
        return
    entry = _find(state, action)
    entry_id = str(entry["id"])
    if action.action in ("approve", "edit"):
        done = state.client.approve_memory(entry_id, action.text)
        verb = "approved as edited" if action.text is not None else "approved"
        state.say(f"{verb}: {_shown(done['text'])}", "green")
    elif action.action == "reject":
        state.client.reject_memory(entry_id)
        state.say(f"rejected: {_shown(entry['text'])}", "yellow")
    else:
        state.client.delete_memory(entry_id)
        state.say(f"forgot: {_shown(entry['text'])}", "yellow")
