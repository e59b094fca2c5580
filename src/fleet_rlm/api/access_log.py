"""The access log never shows a credential.

The token is refused in URLs (:mod:`fleet_rlm.api.auth`), but a client may still send one, and a
stream ticket rides in the URL by design; uvicorn logs each request line with its query string. So
the values of ``token``, ``ticket`` and ``access_token`` parameters (names compared decoded) become
``[redacted]``, and so does the API token wherever else it appears in the line. The filter sits on
uvicorn's access logger itself, so it holds whatever handlers or log configuration the server runs with.
"""

from __future__ import annotations

import logging
from urllib.parse import quote, quote_plus, unquote_plus

ACCESS_LOGGER = "uvicorn.access"
SECRET_PARAMS = frozenset({"token", "ticket", "access_token"})
REDACTED = "[redacted]"


def _redact_query(query: str) -> str:
    pairs = []
    for pair in query.split("&"):
        name, equals, _value = pair.partition("=")
        pairs.append(f"{name}={REDACTED}" if equals and unquote_plus(name).lower() in SECRET_PARAMS else pair)
    return "&".join(pairs)


class RedactSecrets(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def redact(self, text: str) -> str:
        path, mark, query = text.partition("?")
        text = path + mark + _redact_query(query) if mark else text
        for secret in self.secrets:
            for form in {secret, quote(secret, safe=""), quote_plus(secret, safe="")}:
                text = text.replace(form, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self.redact(arg) if isinstance(arg, str) else arg for arg in record.args)
        elif isinstance(record.msg, str):
            record.msg = self.redact(record.msg)
        return True


def install(token: str | None) -> None:
    """Put the filter on uvicorn's access logger (once) and teach it ``token``."""
    logger = logging.getLogger(ACCESS_LOGGER)
    found = next((f for f in logger.filters if isinstance(f, RedactSecrets)), None)
    if found is None:
        found = RedactSecrets()
        logger.addFilter(found)
    if token:
        found.secrets.add(token)
