"""The ``Host`` check: the API answers loopback names and the operator's ``allowed_hosts`` only.

A web page can make a browser send requests to a server on 127.0.0.1 under the page's own name
(DNS rebinding: the name first resolves to the attacker, then to 127.0.0.1); the ``Host`` header
still carries that name, so refusing unknown names stops it. Starlette's TrustedHostMiddleware does
the same but answers in plain text and cannot parse ``[::1]:8765``; this keeps the API's error shape.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from fleet_rlm.api.errors import error_response

LOOPBACK_NAMES = ("localhost",)


def host_name(header: str) -> str | None:
    """The host part of a ``Host`` header (lower case, IPv6 without brackets), or None if malformed."""
    try:
        parts = urlsplit(f"//{header}")
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        return None
    if not parts.hostname or parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    return parts.hostname.rstrip(".")


def is_loopback_name(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HostPolicy:
    def __init__(self, allowed: Sequence[str]) -> None:
        self.any = "*" in allowed
        self.exact = {name for name in allowed if not name.startswith("*")}
        self.suffixes = tuple(name[1:] for name in allowed if name.startswith("*."))

    def allows(self, host: str) -> bool:
        return self.any or is_loopback_name(host) or host in self.exact or host.endswith(self.suffixes)


class HostCheckMiddleware:
    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]) -> None:
        self.app = app
        self.policy = HostPolicy(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.policy.any:
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("host", "")
        host = host_name(header)
        if host is None or not self.policy.allows(host):
            shown = header[:100] or "(none)"
            response = error_response(
                421,
                "host_not_allowed",
                f"this server does not answer for the host {shown!r}; its operator lists the names it serves "
                "in FLEET_ALLOWED_HOSTS",
                path=scope["path"],
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
