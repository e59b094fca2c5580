"""A bounded number of host threads per sandbox for the tool calls its code makes.

Sandbox code can write ``tool_call`` lines as fast as it likes; each would otherwise take a host thread.
At most ``count`` calls of one sandbox run at once; the reader of the sandbox's replies waits for one to
finish before it takes the next call, so a flood holds back the sandbox (its reply pipe fills and its
writes block) instead of multiplying the host's threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

MAX_TOOL_CALLS_AT_ONCE = 8
"""Tool calls of one sandbox served at once (each on a host thread of its own); more wait their turn."""


class ToolWorkers:
    """Runs jobs on at most ``count`` threads at once; ``run`` waits for a free one."""

    def __init__(self, count: int = MAX_TOOL_CALLS_AT_ONCE) -> None:
        self._count = count
        self._busy = 0
        self._closed = False
        self._changed = threading.Condition()

    def run(self, job: Callable[[], None]) -> bool:
        """Start ``job`` on a thread once fewer than ``count`` run; False when closed meanwhile."""
        with self._changed:
            self._changed.wait_for(lambda: self._closed or self._busy < self._count)
            if self._closed:
                return False
            self._busy += 1
        try:
            threading.Thread(target=self._serve, args=(job,), daemon=True).start()
        except BaseException:
            self._done()
            raise
        return True

    def close(self) -> None:
        """No more jobs: a ``run`` waiting for a thread returns False (running jobs finish)."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _serve(self, job: Callable[[], None]) -> None:
        try:
            job()
        finally:
            self._done()

    def _done(self) -> None:
        with self._changed:
            self._busy -= 1
            self._changed.notify_all()
