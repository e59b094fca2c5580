"""What code in the sandbox cannot do, and how the sandbox survives code that tries."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest
from dspy.primitives.code_interpreter import CodeExecutionError, CodeInterpreterError

from fleet_rlm.sandbox.base import SandboxCrashed
from fleet_rlm.sandbox.isolation import walk_processes_of
from fleet_rlm.sandbox.local_sandbox import LocalSandbox
from fleet_rlm.workspace.tree import SafeTree

from .helpers import SandboxMaker

PROBE_OPEN = "try:\n    print(open({path!r}).read())\nexcept OSError as exc:\n    print(type(exc).__name__)"


def test_network_is_unreachable(sandbox: LocalSandbox) -> None:
    code = (
        "import socket\n"
        "for address in [('127.0.0.1', 5432), ('1.1.1.1', 53)]:\n"
        "    try:\n"
        "        socket.create_connection(address, timeout=2)\n"
        "        print('connected')\n"
        "    except OSError as exc:\n"
        "        print('refused', exc.errno)"
    )
    output = sandbox.execute(code)
    assert "connected" not in output
    assert output.count("refused") == 2


def test_host_files_outside_the_workspace_are_hidden(sandbox: LocalSandbox, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    for path in (secret, Path.home() / ".bashrc", Path("/etc/hostname"), Path(__file__)):
        assert sandbox.execute(PROBE_OPEN.format(path=str(path))) in {"FileNotFoundError", "PermissionError"}


def test_workspace_is_readable_and_writable(sandbox: LocalSandbox, workspace: Path) -> None:
    SafeTree(workspace).write("given.txt", b"from host")
    code = "print(open('given.txt').read())\nopen('made.txt', 'w').write('from sandbox')\nimport os; print(os.getcwd())"
    assert sandbox.execute(code) == "from host\n/workspace"
    assert (workspace / "made.txt").read_text() == "from sandbox"


def test_writing_outside_the_workspace_fails(sandbox: LocalSandbox, tmp_path: Path) -> None:
    outside = tmp_path / "escaped.txt"
    for path in (outside, Path("/escaped.txt"), Path("/usr/escaped.txt"), Path("/workspace/../escaped.txt")):
        code = f"try:\n    open({str(path)!r}, 'w').write('x')\n    print('wrote')\nexcept OSError as exc:\n    print(type(exc).__name__)"
        assert sandbox.execute(code) != "wrote", path
    assert not outside.exists()
    # /tmp is private scratch space.
    scratch = f"/tmp/fleet-scratch-{uuid.uuid4().hex}"
    assert sandbox.execute(f"open({scratch!r}, 'w').write('ok'); print(open({scratch!r}).read())") == "ok"
    assert not Path(scratch).exists()


def test_host_environment_is_invisible(make_sandbox: SandboxMaker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_LM_API_KEY", "sk-host-secret")
    sandbox = make_sandbox()
    output = sandbox.execute("import os; print(sorted(os.environ)); print(os.environ.get('FLEET_LM_API_KEY'))")
    assert "sk-host-secret" not in output
    assert output.endswith("None")
    assert "FLEET_LM_API_KEY" not in output


def test_sandbox_runs_as_its_own_unprivileged_user(sandbox: LocalSandbox) -> None:
    if os.getuid() != 0:
        pytest.skip("a per-sandbox uid is used only when the host runs as root")
    uid = int(sandbox.execute("import os; print(os.getuid())"))
    assert uid == sandbox.worker_uid and uid >= 200_000
    assert sandbox.execute("import os\ntry:\n    os.setuid(0)\nexcept OSError as e:\n    print(e.errno)") == "1"


def test_fork_bomb_is_contained(make_sandbox: SandboxMaker) -> None:
    sandbox = make_sandbox(max_processes=20)
    with pytest.raises(CodeExecutionError) as caught:
        sandbox.execute("import os\nwhile True:\n    os.fork()")
    assert "BlockingIOError" in str(caught.value)
    assert "at most 20 processes" in str(caught.value)
    assert sandbox.execute("print('worker survived')") == "worker survived"


def test_memory_bomb_is_contained(make_sandbox: SandboxMaker) -> None:
    sandbox = make_sandbox(memory_mb=512)
    code = "def grow():\n    chunks = []\n    while True:\n        chunks.append(bytearray(32 * 1024 * 1024))\ngrow()"
    with pytest.raises(CodeExecutionError, match=r"MemoryError[\s\S]*memory limit is 512 MB"):
        sandbox.execute(code)
    assert sandbox.execute("print(len(bytearray(64 * 1024 * 1024)))") == str(64 * 1024 * 1024)


def test_file_size_limit(make_sandbox: SandboxMaker) -> None:
    sandbox = make_sandbox(max_file_size_mb=1)
    with pytest.raises(CodeExecutionError, match=r"File too large[\s\S]*file size limit is 1 MB"):
        sandbox.execute("open('big.bin', 'wb').write(b'0' * 2 * 1024 * 1024)")


def test_infinite_loop_times_out_and_state_survives(make_sandbox: SandboxMaker) -> None:
    sandbox = make_sandbox(execution_timeout=0.5)
    sandbox.execute("kept = 'still here'")
    with pytest.raises(CodeExecutionError, match=r"exceeded execution timeout of 0.5 seconds"):
        sandbox.execute("while True:\n    pass")
    assert sandbox.execute("print(kept)") == "still here"


def test_code_ignoring_the_interrupt_is_killed(make_sandbox: SandboxMaker) -> None:
    sandbox = make_sandbox(execution_timeout=0.5)
    code = "import time\nwhile True:\n    try:\n        time.sleep(0.05)\n    except KeyboardInterrupt:\n        pass"
    with pytest.raises(CodeInterpreterError, match="did not stop when interrupted") as caught:
        sandbox.execute(code)
    assert not isinstance(caught.value, CodeExecutionError)
    assert isinstance(caught.value, SandboxCrashed)
    assert caught.value.cause == "the code ran past the 0.5s timeout and did not stop when interrupted"
    with pytest.raises(CodeInterpreterError, match="did not stop when interrupted"):
        sandbox.execute("print('again')")


@pytest.mark.parametrize(
    ("code", "reason", "cause"),
    [
        ("print('bye', flush=True)\nimport os\nos._exit(3)", "exit status 3", "exit status 3"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL", "SIGKILL"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", "killed by SIGTERM", "SIGTERM"),
    ],
)
def test_dead_worker_is_an_interpreter_error(sandbox: LocalSandbox, code: str, reason: str, cause: str) -> None:
    sandbox.execute("x = 1")
    with pytest.raises(CodeInterpreterError, match=f"exited unexpectedly \\({reason}") as caught:
        sandbox.execute(code)
    assert not isinstance(caught.value, CodeExecutionError)
    assert isinstance(caught.value, SandboxCrashed) and caught.value.cause == cause
    assert caught.value.output == ("bye" if "bye" in code else "")
    with pytest.raises(CodeInterpreterError, match="exited unexpectedly"):
        sandbox.execute("print(x)")


def test_a_broken_protocol_is_a_crash(sandbox: LocalSandbox) -> None:
    garbage = "import os\nfor fd in range(3, 1024):\n    try:\n        os.write(fd, b'not json\\n')\n    except OSError:\n        pass"
    with pytest.raises(SandboxCrashed, match="the sandbox worker failed: unreadable reply") as caught:
        sandbox.execute(garbage)
    assert caught.value.cause.startswith("a protocol error (unreadable reply: ")
    with pytest.raises(CodeInterpreterError, match="unreadable reply"):
        sandbox.execute("pass")


def test_interrupt_cancels_a_running_execution_quickly(sandbox: LocalSandbox) -> None:
    sandbox.start()
    errors: list[BaseException] = []
    ended: list[float] = []

    def run() -> None:
        try:
            sandbox.execute("import time\ntime.sleep(30)")
        except BaseException as exc:
            errors.append(exc)
        ended.append(time.monotonic())

    runner = threading.Thread(target=run)
    runner.start()
    time.sleep(0.3)
    interrupted = time.monotonic()
    sandbox.interrupt()
    runner.join(timeout=5)
    assert ended and ended[0] - interrupted < 1.0
    assert isinstance(errors[0], CodeInterpreterError) and "cancelled" in str(errors[0])
    assert not isinstance(errors[0], SandboxCrashed)  # a cancel is not a crash: nothing restarts it
    with pytest.raises(CodeInterpreterError, match="cancelled"):
        sandbox.execute("pass")


def test_no_processes_are_left_after_shutdown(sandbox: LocalSandbox) -> None:
    sandbox.execute(
        "import os, subprocess, time\n"
        "subprocess.Popen(['sleep', '60'])\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
    )
    pid, uid = sandbox.worker_pid, sandbox.worker_uid
    assert pid is not None
    sandbox.shutdown()
    assert not Path(f"/proc/{pid}").exists()
    if uid is not None:
        deadline = time.monotonic() + 2
        while list(walk_processes_of(uid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(walk_processes_of(uid)) == []
    with pytest.raises(CodeInterpreterError, match="shut down"):
        sandbox.execute("pass")


def test_cpu_time_limit_stops_the_worker(make_sandbox: SandboxMaker) -> None:
    sandbox = make_sandbox(cpu_seconds=1, execution_timeout=10.0)
    with pytest.raises(CodeInterpreterError, match="CPU time limit of 1s"):
        sandbox.execute("while True:\n    pass")


def test_thread_limit_is_reported_too(make_sandbox: SandboxMaker) -> None:
    sandbox = make_sandbox(max_processes=12)
    code = "import threading\nstop = threading.Event()\nfor _ in range(40):\n    threading.Thread(target=stop.wait).start()"
    with pytest.raises(CodeExecutionError, match=r"can't start new thread[\s\S]*at most 12 processes and threads"):
        sandbox.execute(code)
    assert sandbox.execute("stop.set()\nprint('worker survived')") == "worker survived"


def test_timeout_interrupts_blocking_calls(make_sandbox: SandboxMaker) -> None:
    sandbox = make_sandbox(execution_timeout=0.5)
    sandbox.tools["stall"] = lambda: threading.Event().wait(3) and None
    for code in ("import time\ntime.sleep(30)", "import threading\nthreading.Event().wait()", "stall()"):
        with pytest.raises(CodeExecutionError, match=r"exceeded execution timeout of 0.5 seconds"):
            sandbox.execute(code)
    assert sandbox.execute("print('still usable')") == "still usable"


def test_worker_killed_from_outside_is_an_interpreter_error(sandbox: LocalSandbox) -> None:
    sandbox.execute("x = 1")
    assert sandbox.worker_pid is not None
    os.kill(sandbox.worker_pid, signal.SIGKILL)
    # Killing bwrap takes the worker down with it, asynchronously: wait until it is gone.
    uid = sandbox.worker_uid
    deadline = time.monotonic() + 5
    while uid is not None and list(walk_processes_of(uid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(CodeInterpreterError, match="exited unexpectedly") as caught:
        sandbox.execute("print(x)")
    assert not isinstance(caught.value, CodeExecutionError)
