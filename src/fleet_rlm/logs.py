"""Where Fleet's diagnostic logs go: a file under the data directory, never over a person's screen.

DSPy writes its warnings (e.g. "RLM reached max iterations") straight to stderr; Fleet already
reports those as events, so the CLI sends every library log to ``<data dir>/logs/fleet.log``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fleet_rlm.config import Settings

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


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
