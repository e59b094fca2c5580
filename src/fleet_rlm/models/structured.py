"""Does a model endpoint honour a JSON schema in ``response_format``? Asked once per endpoint.

Servers that do (OpenAI, vLLM, llama.cpp's server, which turns the schema into a grammar) make a reply
that breaks the schema impossible; servers that do not either refuse the field or ignore it. The probe
tells the three apart with one short completion: the schema admits only ``{"ok": true}`` or
``{"ok": false}``, and the prompt asks for neither, so only a server that constrains its output to the
schema answers with it.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from fleet_rlm.config.sections import LMSettings
from fleet_rlm.models.endpoint import auth_headers

PROBE_TIMEOUT_SECONDS = 30.0
PROBE_MAX_TOKENS = 12
UNAVAILABLE = frozenset({502, 503, 504})
"""Statuses of a server or proxy not ready to answer: the probe learns nothing from them. Any other
refusal (llama-cpp-python answers 500 to a ``response_format`` type it does not know) is an answer."""

Style = Literal["json_schema", "json_object_schema"]
"""How a schema is sent: OpenAI's ``{"type": "json_schema", "json_schema": {...}}``, or llama-cpp-python's
``{"type": "json_object", "schema": {...}}`` (its server refuses the first with a 500)."""

STYLES: tuple[Style, ...] = ("json_schema", "json_object_schema")

_PROBE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}


def response_format(style: Style, name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The ``response_format`` value that asks a server of ``style`` for replies matching ``schema``."""
    if style == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    return {"type": "json_object", "schema": schema}


@dataclass(frozen=True)
class SchemaSupport:
    """What the probe found: the style the endpoint honours (None: neither), and what it saw."""

    style: Style | None
    detail: str
    reached: bool = True
    """False when the endpoint could not be reached: nothing is known, and it is asked again."""


Answer = Literal["honoured", "refused", "ignored", "unreachable"]


def _ask(lm: LMSettings, style: Style) -> tuple[Answer, str]:
    assert lm.base_url and lm.model
    headers = auth_headers(lm)
    body = {
        "model": lm.model.split("/", 1)[1] if lm.model.startswith("openai/") else lm.model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": PROBE_MAX_TOKENS,
        "temperature": 0,
        "response_format": response_format(style, "probe", _PROBE_SCHEMA),
    }
    url = lm.base_url.rstrip("/") + "/chat/completions"
    try:
        response = httpx.post(url, json=body, headers=headers, timeout=min(lm.timeout, PROBE_TIMEOUT_SECONDS))
    except httpx.HTTPError as exc:
        return "unreachable", f"{style}: {url}: {exc}"
    if response.status_code in UNAVAILABLE:
        return "unreachable", f"{style}: {url} answered {response.status_code}"
    if response.status_code != 200:
        return "refused", f"{style}: refused ({response.status_code})"
    try:
        reply = json.loads(response.json()["choices"][0]["message"]["content"])
    except (ValueError, KeyError, IndexError, TypeError):
        reply = None
    if isinstance(reply, dict) and set(reply) == {"ok"} and isinstance(reply["ok"], bool):
        return "honoured", f"{style}: honoured"
    return "ignored", f"{style}: ignored (the reply did not follow the schema)"


def probe_schema_support(lm: LMSettings) -> SchemaSupport:
    """Ask the endpoint, style by style, whether it constrains a reply to a JSON schema (uncached)."""
    seen: list[str] = []
    reached = True
    for style in STYLES:
        answer, detail = _ask(lm, style)
        if answer == "honoured":
            return SchemaSupport(style, detail)
        reached = reached and answer != "unreachable"
        seen.append(detail)
    return SchemaSupport(None, "; ".join(seen), reached)


_known: dict[tuple[str, str], SchemaSupport] = {}
_known_lock = threading.Lock()


def schema_support(lm: LMSettings) -> SchemaSupport:
    """:func:`probe_schema_support`, once per endpoint and model in this process.

    An endpoint that could not be reached is asked again next time; a provider's default endpoint (no
    base URL) is not probed and counts as not honouring a schema."""
    if not lm.base_url or not lm.model:
        return SchemaSupport(None, "not probed: no base URL")
    key = (lm.base_url.rstrip("/"), lm.model)
    with _known_lock:
        known = _known.get(key)
    if known is not None:
        return known
    found = probe_schema_support(lm)
    if found.reached:
        with _known_lock:
            _known[key] = found
    return found
