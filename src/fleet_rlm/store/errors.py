"""Errors the store raises; each carries a stable ``code`` the API turns into a 4xx."""

from __future__ import annotations


class StoreError(Exception):
    code = "store_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class NotFound(StoreError):
    """No such session, turn or file."""

    def __init__(self, kind: str, ref: str) -> None:
        super().__init__(f"no {kind} {ref!r}", code=f"{kind}_not_found")
        self.kind = kind
        self.ref = ref


class Conflict(StoreError):
    """The request contradicts the current state (a name taken, a turn already running, ...)."""

    code = "conflict"


class Invalid(StoreError):
    """A value is not acceptable; the message names it."""

    code = "invalid_request"
