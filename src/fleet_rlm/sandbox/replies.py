"""The reader of a worker's reply pipe: tool calls go to the sandbox's tool workers, and only the replies
the host is waiting for reach its inbox.

A thread left behind in a kernel can write reply lines between turns, when nobody takes them; kept,
each would stay decoded in the host's memory until the next turn. So the inbox gets the first
``ready``, one ``result`` for the execution that is running, and one ``fatal``; every other line is
read and dropped, and the inbox never holds more than a few messages.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from fleet_rlm.sandbox.protocol import decode_message

MAX_REPLY_BYTES = 256 * 1024 * 1024  # a SUBMIT larger than this is refused rather than exhausting the host
CLOSED = object()  # the worker's reply pipe ended

ToolCallDispatcher = Callable[[dict[str, Any]], bool]
"""Takes one ``tool_call`` (waiting for a free tool worker); False when the sandbox is ending."""


class ReplyReader:
    """Reads one worker's replies on a thread of its own, until the pipe ends."""

    def __init__(
        self,
        fd: int,
        inbox: queue.Queue[Any],
        dispatch: ToolCallDispatcher,
        running_execution: Callable[[], int | None],
    ) -> None:
        self._fd = fd
        self._inbox = inbox
        self._dispatch = dispatch
        self._running_execution = running_execution
        self._ready_seen = False
        self._fatal_seen = False
        self._delivered_execution: int | None = None

    def start(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        with os.fdopen(self._fd, "rb") as stream:
            try:
                while line := stream.readline(MAX_REPLY_BYTES):
                    if not line.endswith(b"\n"):
                        raise ValueError(f"a reply longer than {MAX_REPLY_BYTES} bytes")
                    message = decode_message(line)
                    if message["type"] == "tool_call":
                        if not self._dispatch(message):
                            break
                    elif self._awaited(message):
                        self._inbox.put(message)
            except (OSError, ValueError) as exc:
                self._inbox.put({"type": "fatal", "error": f"unreadable reply: {exc}"})
        self._inbox.put(CLOSED)

    def _awaited(self, message: dict[str, Any]) -> bool:
        """Whether the host waits for ``message``; each kind is let through at most once per wait."""
        kind = message["type"]
        if kind == "ready" and not self._ready_seen:
            self._ready_seen = True
            return True
        if kind == "fatal" and not self._fatal_seen:
            self._fatal_seen = True
            return True
        execution = self._running_execution()
        if kind != "result" or execution is None or self._delivered_execution == execution:
            return False
        if message.get("execution") != execution:
            return False  # a reply to an execution that already ended
        self._delivered_execution = execution
        return True
