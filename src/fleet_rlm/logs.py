"""Where Fleet's diagnostic logs go, and how a failing background step is logged.

- A file under the data directory, never over a person's screen: DSPy writes its warnings (e.g. "RLM
  reached max iterations") straight to stderr; Fleet already reports those as events, so the CLI
  sends every library log to ``<data dir>/logs/fleet.log``.
- :class:`FailureLog`: a background step that keeps failing logs its traceback once, then one line a
  minute while it goes on failing, and one line when it works again, so a process that lost its
  database does not fill its log with the same traceback every second.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from fleet_rlm.config import Settings

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
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


def log_to_file(settings: Settings, name: str = "fleet.log") -> Path:
    """Send the root logger and DSPy's loggers to a file under ``settings.logs_dir``; return its path."""
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
    path = settings.logs_dir / name
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.INFO)
    dspy_logger = logging.getLogger("dspy")
    dspy_logger.handlers = []
    dspy_logger.propagate = True
    return path
