"""Error text that may go back to sandbox code: host details taken out.

A host tool that fails sends its error to the sandbox, and from there it reaches the turn's events,
the answer and the log. Messages written by Fleet say only what the sandbox code sent; messages of
exceptions raised by host code (DSPy, the model client) pass through :func:`scrub` first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from fleet_rlm.sandbox.isolation import WORKSPACE_MOUNT

REDACTED = "[redacted]"
MAX_ERROR_CHARS = 1_000
MIN_ENVIRONMENT_VALUE_CHARS = 8
"""Environment values this long or longer are redacted wherever they appear (shorter ones are words)."""

_HOST_OBJECT = re.compile(r"<[^<>\n]{1,300}? (?:object )?at 0x[0-9a-fA-F]+>")
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]{0,20}://[^\s'\"<>()\[\]{}]+")
_HOST_PATH = re.compile(rf"(?<![\w.:/~-])/(?!{re.escape(WORKSPACE_MOUNT.strip('/'))}(?:/|\b))[^\s'\"<>()\[\]{{}},;:]+")


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without ``secrets``, environment values, object reprs, URLs and host paths; cut short."""
    values = {value for value in secrets if value}
    values.update(value for value in os.environ.values() if len(value) >= MIN_ENVIRONMENT_VALUE_CHARS)
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    text = _HOST_OBJECT.sub("<host object>", text)
    text = _URL.sub("<url>", text)
    text = _HOST_PATH.sub("<host path>", text)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."
