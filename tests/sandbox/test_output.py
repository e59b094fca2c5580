"""Output streams back while code runs, from Python and from anything else writing to fds 1 and 2."""

from __future__ import annotations

import threading
import time

from fleet_rlm.sandbox.local_sandbox import LocalSandbox

from .helpers import RecordingObserver, SandboxMaker


def test_output_arrives_while_code_still_runs(sandbox: LocalSandbox, observer: RecordingObserver) -> None:
    sandbox.start()
    finished: list[float] = []

    def run() -> None:
        sandbox.execute("print('early')\nimport time\ntime.sleep(1.0)\nprint('late')")
        finished.append(time.monotonic())

    runner = threading.Thread(target=run)
    runner.start()
    assert observer.wait_for_text("early\n")
    assert not finished  # the code is still sleeping
    assert observer.text() == "early\n"
    runner.join()
    assert observer.text() == "early\nlate\n"


def test_subprocess_and_raw_fd_output_is_captured(sandbox: LocalSandbox, observer: RecordingObserver) -> None:
    code = (
        "import os, subprocess\n"
        "subprocess.run(['echo', 'from echo'], check=True)\n"
        "_ = os.write(2, b'raw stderr\\n')\n"
        "print('from print')"
    )
    result = sandbox.execute(code)
    # Both streams land in the result; their interleaving follows arrival, so only each stream's order is fixed.
    assert sorted(result.split("\n")) == ["from echo", "from print", "raw stderr"]
    assert observer.text("stderr") == "raw stderr\n"
    assert observer.text("stdout") == "from echo\nfrom print\n"


def test_output_is_capped_with_a_note(make_sandbox: SandboxMaker, observer: RecordingObserver) -> None:
    sandbox = make_sandbox(max_output_chars=1_000)
    result = sandbox.execute("print('x' * 5_000)")
    assert result == "x" * 1_000 + "\n[... 4001 more characters cut]"
    assert observer.text() == "x" * 1_000  # the observer is spared the flood too
    assert len(observer.warnings) == 1 and "1000 characters" in observer.warnings[0]
    # The cap is per execution.
    assert sandbox.execute("print('short')") == "short"


def test_no_output_returns_none(sandbox: LocalSandbox) -> None:
    assert sandbox.execute("x = 1") is None


def test_non_utf8_output_does_not_break_the_stream(sandbox: LocalSandbox) -> None:
    assert sandbox.execute("import os; _ = os.write(1, b'caf\\xe9 ok\\n')") == "caf\ufffd ok"
