"""What sandbox code changes in its own process never stops the worker from answering.

Each test tampers with something the worker relies on, then checks that the next execution still
answers correctly and that what the code defined earlier is still there.
"""

from __future__ import annotations

import time

import pytest
from dspy.primitives.code_interpreter import CodeExecutionError, FinalOutput

from fleet_rlm.sandbox.local_sandbox import LocalSandbox

from .helpers import RecordingObserver, SandboxMaker


def still_answers(sandbox: LocalSandbox) -> None:
    """Output, a tool call, a persisted variable, list and bytes inputs and SUBMIT all still work."""
    sandbox.tools["add"] = lambda a, b: a + b
    result = sandbox.execute(
        "print(kept, add(2, 3), rows[-1], blob[:2])", variables={"rows": [1, 2, 3], "blob": b"\x00\xffdata"}
    )
    assert result == "before 5 3 b'\\x00\\xff'"
    sandbox.output_fields = [{"name": "answer", "type": "str"}, {"name": "count", "type": "int"}]
    assert sandbox.execute("SUBMIT('yes', 3)") == FinalOutput({"answer": "yes", "count": 3})
    sandbox.output_fields = None


def prints_on_both_streams(sandbox: LocalSandbox, observer: RecordingObserver) -> None:
    """Output written to stdout and stderr reaches the host (each stream's order is fixed, not their mix)."""
    before_out, before_err = observer.text("stdout"), observer.text("stderr")
    result = sandbox.execute("import sys\nprint('out')\nprint('err', file=sys.stderr)\nread = sys.stdin.read()")
    assert sorted(result.split("\n")) == ["err", "out"]
    assert observer.text("stdout")[len(before_out) :] == "out\n"
    assert observer.text("stderr")[len(before_err) :] == "err\n"


@pytest.mark.parametrize(
    "tampering",
    [
        "import builtins\nbuiltins.len = None",
        "import builtins\nbuiltins.isinstance = lambda *args: False",
        "import builtins\nfor name in ('str', 'repr', 'type', 'dict', 'list', 'set', 'next', 'iter', 'compile',\n"
        "             'exec', 'eval', 'memoryview', 'KeyboardInterrupt', 'TypeError', 'getattr', 'setattr'):\n"
        "    setattr(builtins, name, None)",
        "import builtins\nbuiltins.__import__ = None",
        "del __builtins__",
    ],
    ids=["len", "isinstance", "many", "import", "deleted"],
)
def test_changed_builtins_do_not_break_the_worker(sandbox: LocalSandbox, tampering: str) -> None:
    sandbox.execute("kept = 'before'\nimport builtins\noriginal = dict(vars(builtins))")
    sandbox.execute(tampering)
    still_answers(sandbox)
    sandbox.execute("vars(builtins).update(original)")  # as the code put them back, it sees them


def test_replaced_builtins_are_put_back_after_the_execution_and_the_model_is_told(sandbox: LocalSandbox) -> None:
    replaced = sandbox.execute("import builtins\nbuiltins.len = lambda value: 42\ndel builtins.sorted\nprint(len([1]))")
    assert replaced == "42\n[the code replaced builtins (len, sorted); Python's own are back for the next execution]"
    assert sandbox.execute("print(len([1]), sorted([2, 1]))") == "1 [1, 2]"
    assert sandbox.execute("builtins.extra = 'mine'\nprint(extra)") == "mine"  # an addition is left alone
    assert sandbox.execute("print(extra)") == "mine"


def test_an_error_after_changing_builtins_fails_only_that_execution(sandbox: LocalSandbox) -> None:
    with pytest.raises(CodeExecutionError) as caught:
        sandbox.execute("import builtins\nbuiltins.len = None\nx = 1\nlen([x])")
    assert "TypeError: 'NoneType' object is not callable" in str(caught.value)
    assert "Python's own are back for the next execution" in str(caught.value)
    assert caught.value.line == 4  # type: ignore[attr-defined]
    assert sandbox.execute("print(len([x]))") == "1"


def test_replaced_standard_streams_are_put_back(sandbox: LocalSandbox, observer: RecordingObserver) -> None:
    sandbox.execute("kept = 'before'")
    code = "import io, sys\nsys.stdout = io.StringIO()\nsys.stderr = None\nsys.stdin = None\nprint('hidden')"
    assert sandbox.execute(code) is None  # within the execution, the code's own streams hold
    prints_on_both_streams(sandbox, observer)
    still_answers(sandbox)


def test_patched_stream_methods_are_put_back(sandbox: LocalSandbox, observer: RecordingObserver) -> None:
    code = "import sys\ncaptured = []\nsys.stdout.write = captured.append\nprint('caught')"
    assert sandbox.execute(code) is None
    assert sandbox.execute("print(captured)") == "['caught', '\\n']"
    prints_on_both_streams(sandbox, observer)


def test_closed_standard_streams_are_reopened(sandbox: LocalSandbox, observer: RecordingObserver) -> None:
    sandbox.execute("kept = 'before'\nimport sys\nsys.stdout.close()\nsys.stderr.close()\nsys.stdin.close()")
    prints_on_both_streams(sandbox, observer)
    still_answers(sandbox)


@pytest.mark.parametrize(
    "tampering",
    [
        "import os\nos.close(0)\nos.close(1)\nos.close(2)",
        "import os\nnull = os.open('/dev/null', os.O_WRONLY)\nfor fd in (0, 1, 2):\n    os.dup2(null, fd)",
        "import os\nos.closerange(3, 256)",
    ],
    ids=["closed", "dup2", "closerange"],
)
def test_file_descriptors_0_to_2_are_restored(
    sandbox: LocalSandbox, observer: RecordingObserver, tampering: str
) -> None:
    sandbox.execute("kept = 'before'")
    sandbox.execute(tampering)
    prints_on_both_streams(sandbox, observer)
    still_answers(sandbox)


@pytest.mark.parametrize(
    "tampering",
    [
        "import json, sys\nfor name in ('json', 'json.decoder', '_json', 'os', 'io', 'signal', 'binascii'):\n"
        "    sys.modules.pop(name, None)",
        "import sys\nfor name in ('json', 'base64', 'binascii', 'traceback', 'linecache', 'queue', 'threading'):\n"
        "    sys.modules[name] = None",
    ],
    ids=["deleted", "blocked"],
)
def test_changed_sys_modules_do_not_break_the_worker(sandbox: LocalSandbox, tampering: str) -> None:
    sandbox.execute("kept = 'before'")
    sandbox.execute(tampering)
    still_answers(sandbox)
    with pytest.raises(CodeExecutionError, match=r"ZeroDivisionError: division by zero"):
        sandbox.execute("1 / 0")


@pytest.mark.parametrize(
    "tampering",
    [
        "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)",
        "import signal\nsignal.signal(signal.SIGALRM, lambda *args: None)",
        "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})",
    ],
    ids=["ignored", "handled", "blocked"],
)
def test_the_deadline_survives_changed_signal_handling(make_sandbox: SandboxMaker, tampering: str) -> None:
    sandbox = make_sandbox(execution_timeout=0.5)
    sandbox.execute("kept = 'before'")
    sandbox.execute(tampering)
    with pytest.raises(CodeExecutionError, match=r"exceeded execution timeout of 0.5 seconds"):
        sandbox.execute("while True:\n    pass")
    still_answers(sandbox)


def test_unrepresentable_values_are_errors_not_a_dead_worker(sandbox: LocalSandbox) -> None:
    sandbox.execute("kept = 'before'\nclass Odd:\n    def __repr__(self):\n        raise ValueError('no repr')")
    sandbox.output_fields = [{"name": "answer"}]
    with pytest.raises(CodeExecutionError, match=r"ValueError: no repr"):
        sandbox.execute("SUBMIT(Odd())")
    sandbox.output_fields = None
    sandbox.return_trailing_value = True
    with pytest.raises(CodeExecutionError, match=r"ValueError: no repr"):
        sandbox.execute("Odd()")
    sandbox.return_trailing_value = False
    still_answers(sandbox)


def test_code_too_deeply_nested_to_compile_is_a_syntax_error(sandbox: LocalSandbox) -> None:
    sandbox.execute("kept = 'before'")
    with pytest.raises(SyntaxError, match="could not be compiled"):
        sandbox.execute("-" * 200_000 + "1")
    still_answers(sandbox)


def test_a_signal_handler_raising_between_executions_is_ignored(sandbox: LocalSandbox) -> None:
    code = (
        "kept = 'before'\n"
        "import os, signal, threading\n"
        "signal.signal(signal.SIGUSR1, lambda *args: 1 / 0)\n"
        "threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()"
    )
    sandbox.execute(code)
    time.sleep(0.6)  # the signal arrives while the worker waits for the next command
    still_answers(sandbox)
