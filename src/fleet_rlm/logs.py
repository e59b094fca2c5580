"""Where Fleet's diagnostic logs go, and how a failing background step is logged.

- A file under the data directory, never over a person's screen: DSPy writes its warnings (e.g. "RLM
  reached max iterations") straight to stderr; Fleet already reports those as events, so the CLI
  sends every library log to ``<data dir>/logs/fleet.log``.
- :class:`FailureLog`: a background step that keeps failing logs its traceback once, then one line a
  minute while it goes on failing, and one line when it works again, so a process that lost its
  database does not fill its log with the same traceback every second.
- :func:`logs_on_a_thread`: a server's log lines (uvicorn writes one per request) are formatted and
  written by a thread of their own. Written on the event loop's thread, each line cost the loop its
  formatting and write, and a reader of stderr that fell behind (a terminal, a journal, a container
  runtime) stalled every request and stream with it.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import queue
import sys
import threading
import time
from collections.abc import Iterator
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


LIBRARY_LOGGERS = ("dspy", "LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
"""Loggers that libraries give handlers of their own (to stderr); :func:`log_to_file` takes them away."""


def log_to_file(settings: Settings, name: str = "fleet.log", *, verbose: bool = False) -> Path:
    """Send the root logger and the libraries' loggers to a file under ``settings.logs_dir``; return its
    path. ``verbose``: to standard error as well (``fleet run --verbose``)."""
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
    path = settings.logs_dir / name
    formatter = logging.Formatter(LOG_FORMAT)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(formatter)
    handlers: list[logging.Handler] = [handler]
    if verbose:
        screen = logging.StreamHandler(sys.stderr)
        screen.setFormatter(formatter)
        handlers.append(screen)
    root = logging.getLogger()
    root.handlers = handlers
    root.setLevel(logging.INFO)
    # LiteLLM adds its stderr handler when it is first imported (DSPy imports it at the first model call):
    # import it now, so that the handler it adds is the one taken away below.
    importlib.import_module("litellm")
    for library in LIBRARY_LOGGERS:
        logger = logging.getLogger(library)
        logger.handlers = []
        logger.propagate = True
    return path


_Queued = tuple[list[logging.Handler], logging.LogRecord] | None


class _ToThread(logging.Handler):
    """Stands in for a logger's handlers: hands each record, as it is, to the writing thread."""

    def __init__(self, handlers: list[logging.Handler], records: queue.SimpleQueue[_Queued]) -> None:
        super().__init__()
        self.handlers = handlers
        self._records = records

    def emit(self, record: logging.LogRecord) -> None:
        self._records.put((self.handlers, record))


def _write(records: queue.SimpleQueue[_Queued]) -> None:
    while (item := records.get()) is not None:
        handlers, record = item
        for handler in handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


@contextlib.contextmanager
def logs_on_a_thread() -> Iterator[None]:
    """While the block runs, the handlers of the root logger and of every logger that has its own
    handle records on one writing thread (in the order they were logged); the logger's own filters still
    run where the record is made. Afterwards each logger gets its handlers back, every record written."""
    records: queue.SimpleQueue[_Queued] = queue.SimpleQueue()
    loggers = [logging.getLogger(), *logging.root.manager.loggerDict.values()]
    moved = {logger: logger.handlers for logger in loggers if isinstance(logger, logging.Logger) and logger.handlers}
    writer = threading.Thread(target=_write, args=(records,), name="fleet-logs", daemon=True)
    writer.start()
    for logger, handlers in moved.items():
        logger.handlers = [_ToThread(handlers, records)]
    try:
        yield
    finally:
        for logger, handlers in moved.items():
            logger.handlers = handlers
        records.put(None)
        writer.join()
