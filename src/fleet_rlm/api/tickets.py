"""Stream tickets: what a browser's EventSource sends instead of the API token.

EventSource cannot set headers, and a token in a URL ends up in access logs, proxies and browser
history. So a client holding the token asks ``POST /turns/{id}/events/ticket`` and opens
``GET /turns/{id}/events?ticket=...``: the ticket is good for that one stream, once, within
:data:`TICKET_SECONDS`. It is signed with a key derived from the API token, so every server sharing
the token (one database, several processes) accepts it; "once" is remembered per process.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable

TICKET_SECONDS = 30


class TicketBook:
    def __init__(self, token: str | None, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        secret = token.encode() if token else secrets.token_bytes(32)
        self._key = hmac.new(secret, b"fleet stream ticket v1", hashlib.sha256).digest()
        self._used: dict[str, float] = {}

    def _mac(self, path: str, expires: int, nonce: str) -> str:
        return hmac.new(self._key, f"GET {path} {expires} {nonce}".encode(), hashlib.sha256).hexdigest()

    def issue(self, path: str) -> tuple[str, int]:
        """A ticket for one ``GET`` of ``path``, and when it expires (Unix seconds)."""
        expires = int(self._clock()) + TICKET_SECONDS
        nonce = secrets.token_urlsafe(16)
        return f"{expires}.{nonce}.{self._mac(path, expires, nonce)}", expires

    def redeem(self, ticket: str, path: str) -> str | None:
        """None if ``ticket`` opens ``path`` now (and uses it up); else why not."""
        expires_text, _, rest = ticket.partition(".")
        nonce, _, mac = rest.partition(".")
        well_formed = expires_text.isascii() and expires_text.isdigit()  # isdigit alone takes "²"
        expected = self._mac(path, int(expires_text), nonce) if well_formed else ""
        if not expected or not hmac.compare_digest(mac.encode(), expected.encode()):
            return "is not valid for this stream"
        now = self._clock()
        if int(expires_text) < now:
            return "has expired"
        self._used = {n: t for n, t in self._used.items() if t >= now}
        if nonce in self._used:
            return "was already used"
        self._used[nonce] = int(expires_text)
        return None
