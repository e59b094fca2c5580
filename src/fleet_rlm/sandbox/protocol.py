"""The host side of the JSON-lines protocol spoken with ``worker.py``."""

from __future__ import annotations

import json
import os
import select
import time
from typing import Any

from fleet_rlm.sandbox.variables import VariablePlan


def encode_message(message: dict[str, Any]) -> bytes:
    """One protocol line. Raises TypeError/ValueError for a value that is not JSON."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "surrogatepass") + b"\n"


def execute_message(header: dict[str, Any], plan: VariablePlan) -> bytes:
    """The execute line; changed variables are spliced in already encoded, so each is encoded once."""
    message = dict(header, reuse=plan.reuse, forget=plan.forget, bytes_variables=plan.encoded_bytes)
    head = encode_message(message)[:-2]  # drop the closing brace and newline
    variables = b",".join(json.dumps(name).encode() + b":" + data for name, data in plan.encoded.items())
    return head + b',"variables":{' + variables + b"}}\n"


def decode_message(line: bytes) -> dict[str, Any]:
    message = json.loads(line.decode("utf-8", "surrogatepass"))
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ValueError(f"not a protocol message: {line[:200]!r}")
    return message


def write_by(fd: int, data: bytes, deadline: float) -> bool:
    """Write all of ``data`` to the non-blocking ``fd`` by ``deadline`` (``time.monotonic()``); False when
    the reader left some unread that long. Raises OSError when the reader is gone."""
    view = memoryview(data)
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            poller.poll(max(1, int(remaining * 1000)))
    return True
