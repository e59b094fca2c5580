"""Logging a background step that keeps failing: its traceback once, then one line a minute while it goes
on failing, and one line when it works again, so a process that lost its database does not fill its log
with the same traceback every second."""

from __future__ import annotations

import logging
import sys
import time

QUIET_SECONDS = 60.0


class FailureLog:
    def __init__(self, logger: logging.Logger, step: str, quiet_seconds: float = QUIET_SECONDS) -> None:
        self.logger = logger
        self.step = step
        self.quiet_seconds = quiet_seconds
        self._failing_since: float | None = None
        self._last_logged = 0.0

    def failed(self) -> None:
        """Call from the ``except`` block of the failed attempt."""
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = self._last_logged = now
            self.logger.exception("%s failed; trying again", self.step)
        elif now - self._last_logged >= self.quiet_seconds:
            self._last_logged = now
            failing_for = now - self._failing_since
            self.logger.error("%s still failing after %.0f s: %s", self.step, failing_for, sys.exc_info()[1])

    def succeeded(self) -> None:
        if self._failing_since is not None:
            failing_for = time.monotonic() - self._failing_since
            self.logger.warning("%s works again after failing for %.0f s", self.step, failing_for)
            self._failing_since = None
