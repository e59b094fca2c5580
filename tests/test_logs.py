"""A background step that keeps failing logs its traceback once, a line each quiet period while it goes
on failing, and a line when it works again; a server's log lines are written on a thread of their own."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fleet_rlm.logs import FailureLog, logs_on_a_thread


def fail(log: FailureLog, message: str) -> None:
    try:
        raise ConnectionRefusedError(message)
    except ConnectionRefusedError:
        log.failed()


def test_a_step_failing_again_and_again_logs_a_traceback_once_then_a_line_each_quiet_period(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = FailureLog(logging.getLogger("fleet_rlm.test"), "claiming queued turns", quiet_seconds=0.2)
    caplog.set_level(logging.INFO, logger="fleet_rlm.test")
    for _ in range(5):
        fail(log, "the database is down")
    assert [(r.levelname, r.exc_info is not None) for r in caplog.records] == [("ERROR", True)]

    time.sleep(0.25)
    fail(log, "the database is still down")
    fail(log, "the database is still down")
    still = caplog.records[1:]
    assert len(still) == 1 and still[0].exc_info is None
    assert still[0].getMessage().startswith("claiming queued turns still failing after 0 s: ")
    assert "the database is still down" in still[0].getMessage()

    log.succeeded()
    log.succeeded()
    assert [r.getMessage() for r in caplog.records[2:]] == ["claiming queued turns works again after failing for 0 s"]

    fail(log, "down again")
    assert caplog.records[-1].exc_info is not None, "a new spell of failures logs its traceback again"


class Held(logging.Handler):
    """A handler whose writes wait until released (a reader of stderr that fell behind)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.written: list[tuple[str, int]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.gate.wait(10)
        self.written.append((record.getMessage(), threading.get_ident()))


def test_a_server_logs_on_a_thread_so_a_stalled_reader_never_holds_the_caller() -> None:
    logger = logging.getLogger("fleet.test.logs_on_a_thread")
    held, quiet = Held(), Held()
    quiet.setLevel(logging.ERROR)
    logger.handlers, logger.propagate = [held, quiet], False
    logger.addFilter(lambda record: record.getMessage() != "dropped")
    try:
        with logs_on_a_thread():
            logger.warning("one %s", "line")
            logger.warning("dropped")
            logger.warning("two")
            assert held.written == [], "the caller waited for the write"
            held.gate.set()
            quiet.gate.set()
        assert [text for text, _ in held.written] == ["one line", "two"]
        assert threading.get_ident() not in {thread for _, thread in held.written}
        assert quiet.written == [], "a handler's own level still holds"
        assert logger.handlers == [held, quiet]
    finally:
        logger.handlers, logger.propagate = [], True
        logger.filters.clear()


LIBRARY_LINE = """
import logging, sys
from pathlib import Path
from fleet_rlm.config import Settings
from fleet_rlm.logs import log_to_file
path = log_to_file(Settings(home=Path(sys.argv[1])), verbose=sys.argv[2] == "verbose")
import dspy, litellm  # what a turn imports after the logs are set up
logging.getLogger("LiteLLM").info("LiteLLM completion() model= qwen; provider = openai")
print(path)
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_library_loggers_with_handlers_of_their_own_write_to_the_log_file(tmp_path: Path, verbose: bool) -> None:
    """LiteLLM gives its loggers a stderr handler of their own when it is imported; its INFO lines
    (``LiteLLM completion() model= ...``) were printed between ``fleet run``'s lines."""
    mode = "verbose" if verbose else "quiet"
    result = subprocess.run(
        [sys.executable, "-c", LIBRARY_LINE, str(tmp_path), mode], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    path = Path(result.stdout.strip())
    assert "LiteLLM completion()" in path.read_text()
    assert "LiteLLM completion()" not in result.stdout
    assert ("LiteLLM completion()" in result.stderr) is verbose
    assert result.stderr.count("LiteLLM completion()") <= 1
