"""Ids the protocol hands out: ``<prefix>_<16 hex digits>``, the prefix saying what is named; and the
version name of Fleet's built-in program."""

from __future__ import annotations

from fleet_rlm.protocol.events import new_id

SESSION_ID_PREFIX = "ses"
"""Session ids start with ``ses_``; a session name never does, so a reference is never ambiguous."""


def new_session_id() -> str:
    return new_id(SESSION_ID_PREFIX)


def is_session_id(ref: str) -> bool:
    """Whether ``ref`` has the form of a session id (rather than a session name)."""
    return ref.startswith(f"{SESSION_ID_PREFIX}_")


BUILTIN_PROGRAM_VERSION = "builtin"
"""The ``program_version`` of a turn that ran Fleet's built-in program (no approved optimization served)."""
