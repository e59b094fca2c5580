"""Host tools called from sandbox code: results, errors, concurrency and what the observer sees."""

from __future__ import annotations

import inspect
import threading
import time
from typing import Any

import pytest
from dspy.primitives.code_interpreter import CodeExecutionError

from fleet_rlm.sandbox.base import SandboxCrashed
from fleet_rlm.sandbox.local_sandbox import LocalSandbox
from fleet_rlm.sandbox.tool_workers import MAX_TOOL_CALLS_AT_ONCE

from .helpers import RecordingObserver, SandboxMaker


def test_tool_result_and_observer_report(sandbox: LocalSandbox, observer: RecordingObserver) -> None:
    sandbox.tools["add"] = lambda a, b=0: a + b
    assert sandbox.execute("print(add(2, b=3))") == "5"
    [(call_id, name, arguments)] = observer.started
    assert (name, arguments) == ("add", "2, b=3")
    [(finished_id, finished_name, duration, error)] = observer.finished
    assert (finished_id, finished_name, error) == (call_id, "add", None)
    assert duration >= 0


def test_tools_are_read_at_each_execution(sandbox: LocalSandbox) -> None:
    sandbox.tools["shout"] = lambda text: text.upper()
    assert sandbox.execute("shout('hi')") == "'HI'"
    del sandbox.tools["shout"]
    with pytest.raises(CodeExecutionError, match="NameError: name 'shout' is not defined"):
        sandbox.execute("shout('hi')")


def test_tool_exception_surfaces_as_runtime_error(sandbox: LocalSandbox, observer: RecordingObserver) -> None:
    def lookup(key: str) -> str:
        raise KeyError(f"no entry {key}")

    sandbox.tools["lookup"] = lookup
    code = "try:\n    lookup('k1')\nexcept RuntimeError as exc:\n    print('caught:', exc)"
    assert sandbox.execute(code) == "caught: KeyError: 'no entry k1'"
    assert observer.finished[0][3] == "KeyError: 'no entry k1'"


def test_tool_values_must_be_json(sandbox: LocalSandbox) -> None:
    sandbox.tools["opaque"] = lambda: object()
    with pytest.raises(CodeExecutionError, match="tool 'opaque' returned a value that is not JSON-compatible"):
        sandbox.execute("opaque()")
    with pytest.raises(CodeExecutionError, match="arguments to host tool 'opaque' must be JSON-compatible"):
        sandbox.execute("opaque(object())")


def test_async_tool(sandbox: LocalSandbox) -> None:
    async def later(n: int) -> int:
        return n + 1

    sandbox.tools["later"] = later
    assert sandbox.execute("later(41)") == "42"


def test_concurrent_tool_calls_from_sandbox_threads(sandbox: LocalSandbox, observer: RecordingObserver) -> None:
    # Every call waits until all eight are in flight at once, so this only passes if the bridge runs them
    # concurrently and routes each answer back to the thread that asked.
    barrier = threading.Barrier(8, timeout=10)

    def square(n: int) -> int:
        barrier.wait()
        return n * n

    sandbox.tools["square"] = square
    code = (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "with ThreadPoolExecutor(8) as pool:\n"
        "    print(list(pool.map(square, range(8))))"
    )
    assert sandbox.execute(code) == str([n * n for n in range(8)])
    assert len({call_id for call_id, _, _ in observer.started}) == 8
    assert all(error is None for *_, error in observer.finished)


def test_calls_beyond_the_host_bound_wait_their_turn(make_sandbox: SandboxMaker) -> None:
    """The happy path beside the flood: three times as many threads as the host serves at once all get
    their answers, with the bound's worth of calls in flight together."""
    sandbox = make_sandbox(execution_timeout=60.0)  # the barrier, not the timeout, bounds a slow machine
    barrier = threading.Barrier(MAX_TOOL_CALLS_AT_ONCE, timeout=10)
    running: list[int] = [0, 0]  # now, most at once
    counting = threading.Lock()

    def square(n: int) -> int:
        with counting:
            running[0] += 1
            running[1] = max(running)
        try:
            barrier.wait()
            return n * n
        finally:
            with counting:
                running[0] -= 1

    sandbox.tools["square"] = square
    calls = 3 * MAX_TOOL_CALLS_AT_ONCE
    code = (
        "from concurrent.futures import ThreadPoolExecutor\n"
        f"with ThreadPoolExecutor({calls}) as pool:\n"
        f"    print(list(pool.map(square, range({calls}))))"
    )
    assert sandbox.execute(code) == str([n * n for n in range(calls)])
    assert running[1] == MAX_TOOL_CALLS_AT_ONCE


def test_dspy_facade_style_tool_names_work_as_globals(sandbox: LocalSandbox) -> None:
    sandbox.tools["__dspy_probe__"] = lambda handle: f"handled {handle}"
    assert sandbox.execute("print(globals()['__dspy_probe__'](handle='h1'), __dspy_probe__('h2'))") == (
        "handled h1 handled h2"
    )


def test_long_argument_preview_is_short(sandbox: LocalSandbox, observer: RecordingObserver) -> None:
    sandbox.tools["size"] = len
    assert sandbox.execute("size('x' * 1_000_000)") == "1000000"
    assert len(observer.started[0][2]) <= 200


def test_positional_arguments_reach_keyword_only_wrappers(sandbox: LocalSandbox) -> None:
    # dspy.RLM wraps user tools as ``invoke(**kwargs)`` carrying the real signature; code calls them positionally.
    def lookup(key: str, default: str = "none") -> str:
        return f"{key}={default}"

    def invoke(**kwargs: Any) -> str:
        return lookup(**kwargs)

    invoke.__signature__ = inspect.signature(lookup)  # type: ignore[attr-defined]
    sandbox.tools["lookup"] = invoke
    assert sandbox.execute("print(lookup('a'), lookup('b', 'x'), lookup('c', default='y'))") == "a=none b=x c=y"


def test_tool_calls_between_executions_are_refused(sandbox: LocalSandbox, observer: RecordingObserver) -> None:
    sandbox.tools["ping"] = lambda: "pong"
    sandbox.execute(
        "import threading, time\n"
        "answers = []\n"
        "def late():\n"
        "    time.sleep(0.2)\n"
        "    try:\n"
        "        answers.append(ping())\n"
        "    except RuntimeError as exc:\n"
        "        answers.append(str(exc))\n"
        "straggler = threading.Thread(target=late)\n"
        "straggler.start()"
    )
    time.sleep(0.5)
    assert sandbox.execute("straggler.join(); print(answers)") == (
        "['host tools can only be called while an execution is running']"
    )
    assert observer.started == []


def test_a_worker_that_never_reads_the_host_between_executions_is_stopped(make_sandbox: SandboxMaker) -> None:
    """A thread left behind stops the worker's reader and floods the host with tool calls: the host's
    refusals fill the command pipe, and past their deadline the sandbox is stopped, saying why, instead
    of host threads waiting on it for ever."""
    # The refusals' deadline is the interrupt grace; an execution timeout well past it keeps a slow
    # machine from timing the flood out first.
    sandbox = make_sandbox(execution_timeout=60.0)
    sandbox.execute(
        "import _thread, gc, json, os, threading\n"
        "channel = next(o for o in gc.get_objects() if type(o).__name__ == 'Channel')\n"
        "held = _thread.allocate_lock()\n"
        "held.acquire()\n"
        "channel._pending_lock = held\n"
        "def flood():\n"
        "    for number in range(1, 40_001):\n"
        "        call = {'type': 'tool_call', 'id': -number, 'execution': 0, 'name': 'x', 'args': [], 'kwargs': {}}\n"
        "        os.write(channel._reply_fd, (json.dumps(call) + '\\n').encode())\n"
        "flooder = threading.Thread(target=flood)\n"
        "flooder.start()"
    )
    with pytest.raises(SandboxCrashed, match="left the host's messages unread until their deadline") as crash:
        sandbox.execute("flooder.join()")  # the flood ends only when the host stops reading it
    assert crash.value.cause == "it stopped reading the host's messages"
