"""A sandbox: one persistent worker process plus one workspace, driven as a DSPy ``CodeInterpreter``."""

from __future__ import annotations

import contextlib
import contextvars
import json
import keyword
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar, cast

from dspy.primitives import CodeInterpreterError, FinalOutput
from dspy.utils import BaseCallback, with_callbacks

from fleet_rlm.sandbox.base import (
    CodeFailed,
    CodeSyntaxError,
    InvalidInterpreterInput,
    SandboxCrashed,
    SandboxSpec,
    SandboxUnavailable,
)
from fleet_rlm.sandbox.isolation import WORKSPACE_MOUNT, LaunchedWorker, Launcher
from fleet_rlm.sandbox.output import CappedText, GuardedObserver, OutputPump
from fleet_rlm.sandbox.protocol import encode_message, execute_message, write_by
from fleet_rlm.sandbox.replies import ReplyReader
from fleet_rlm.sandbox.tool_calls import check_tool_names, invoke, run_tool_call
from fleet_rlm.sandbox.tool_workers import ToolWorkers
from fleet_rlm.sandbox.variables import VariableCache

DEFAULT_INTERRUPT_GRACE = 2.0
DEFAULT_START_TIMEOUT = 30.0
_CANCELLED = object()  # interrupt() was called
_CALL_TOOLS: contextvars.ContextVar[Mapping[str, Callable[..., Any]] | None] = contextvars.ContextVar(
    "fleet_sandbox_call_tools", default=None
)  # in a tool call's thread: the tools of the execution that made the call

_Method = TypeVar("_Method", bound=Callable[..., Any])


def fires_dspy_callbacks(method: _Method) -> _Method:
    """DSPy's ``with_callbacks``, typed. DSPy picks the hook by the method's name, as for its own
    interpreters: ``start``, ``execute``, ``invoke_tool`` and ``shutdown`` fire
    ``on_interpreter_{startup,execute,tool_call,shutdown}_{start,end}`` of the callbacks configured with
    ``dspy.configure``/``dspy.context`` and of the sandbox's own ``callbacks``."""
    return cast(_Method, with_callbacks(method))


@dataclass(frozen=True)
class _ActiveExecution:
    """What tool calls of the running execution use: its tools, the caller's context variables, and
    when it ends at the latest (``time.monotonic()``), by which its tool replies must be taken."""

    execution: int
    tools: dict[str, Callable[..., Any]]
    context: contextvars.Context
    deadline: float


class SandboxStartError(SandboxUnavailable, CodeInterpreterError):  # type: ignore[misc]
    """The worker did not come up; the message carries what it printed."""


class LocalSandbox:
    """One worker process (isolated by its launcher) and its workspace.

    Implements DSPy's ``CodeInterpreter`` protocol: ``tools`` and ``output_fields`` are read at each
    ``execute``. Errors the model can fix raise ``CodeExecutionError`` (or ``SyntaxError``); a dead,
    stuck or cancelled worker raises ``CodeInterpreterError`` and the sandbox stays unusable. A
    worker that died or broke its protocol by itself raises the subclass ``SandboxCrashed``. Like
    DSPy's own interpreters it fires DSPy's interpreter callbacks (see :func:`fires_dspy_callbacks`).
    """

    def __init__(
        self,
        spec: SandboxSpec,
        launcher: Launcher,
        *,
        interrupt_grace: float = DEFAULT_INTERRUPT_GRACE,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        self.spec = spec
        self._observer = GuardedObserver(spec.observer)
        self.tools: dict[str, Callable[..., Any]] = {}
        self.output_fields: list[dict[str, Any]] | None = None
        self.callbacks: list[BaseCallback] = []
        """DSPy callbacks of this sandbox alone, besides those DSPy's settings hold."""
        self.bytes_sent = 0  # bytes written to the worker, so callers (and tests) can see what travels
        # False: a trailing expression's value is printed, as in a REPL (what dspy.RLM shows the model).
        # True: execute() returns it when it is not None, as DSPy's own interpreters do (dspy.Flex reads it).
        self.return_trailing_value = False
        self._launcher = launcher
        self._interrupt_grace = interrupt_grace
        self._start_timeout = start_timeout
        self._worker: LaunchedWorker | None = None
        self._pump: OutputPump | None = None
        self._inbox: queue.Queue[Any] = queue.Queue()  # holds a few messages at most (see replies.py)
        self._tool_workers = ToolWorkers()
        self._variables = VariableCache()
        self._execute_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._kill_lock = threading.Lock()
        self._execution = 0
        self._ended: str | None = None  # why the sandbox can no longer be used (the first reason stays)
        self._crash_cause: str | None = None  # set when that reason is a crash of the worker
        self._end_lock = threading.Lock()
        self._killed = False
        self._active: _ActiveExecution | None = None

    @property
    def isolated(self) -> bool:
        return self._launcher.isolated

    @property
    def usable(self) -> bool:
        worker = self._worker
        return self._ended is None and (worker is None or worker.process.poll() is None)

    @property
    def workspace_path(self) -> str:
        """The workspace's path as code in the sandbox sees it (also its working directory)."""
        return WORKSPACE_MOUNT if self._launcher.isolated else str(self.spec.workspace.resolve())

    @property
    def worker_uid(self) -> int | None:
        """The uid the sandbox runs as, when it has one of its own."""
        return self._worker.uid if self._worker else None

    @property
    def worker_pid(self) -> int | None:
        """The host pid of the launched process (bwrap when isolated)."""
        return self._worker.process.pid if self._worker else None

    # -- lifecycle --------------------------------------------------------------------------------

    @fires_dspy_callbacks
    def start(self) -> None:
        with self._start_lock:
            self._check_usable()
            if self._worker is not None:
                return
            workspace = self._launch_workspace()
            try:
                worker = self._launcher.launch(workspace, self.spec.limits)
            except OSError as exc:
                raise SandboxStartError(f"could not start the sandbox worker: {exc}") from exc
            self._worker = worker
            os.set_blocking(worker.command_fd, False)  # every write has a deadline (see _send)
            try:
                self._await_ready(worker)
            except BaseException:
                self._end(self._ended or "the sandbox worker failed to start")
                raise

    def _launch_workspace(self) -> Path:
        """The workspace directory the worker is launched on (a subclass may make it here)."""
        workspace = self.spec.workspace
        if not workspace.is_dir():
            raise SandboxUnavailable(f"sandbox workspace {workspace} is not a directory")
        return workspace.resolve()

    def _await_ready(self, worker: LaunchedWorker) -> None:
        self._pump = OutputPump(worker.stdout_fd, worker.stderr_fd, self._observer, self.spec.limits.max_output_chars)
        ReplyReader(worker.reply_fd, self._inbox, self._take_tool_call, self._running_execution).start()
        self._check_usable()  # cancelled while launching
        message = self._next_message(time.monotonic() + self._start_timeout)
        if isinstance(message, dict) and message["type"] == "ready":
            self._pump.ready()
            return
        self._check_usable()  # cancelled while starting
        detail = self._pump.startup_text().strip() or "no output"
        status = self._exit_status() if message is not None else f"not ready after {self._start_timeout:g}s"
        self._end(f"the sandbox worker failed to start ({status}): {detail}")
        raise SandboxStartError(self._ended)

    @fires_dspy_callbacks
    def shutdown(self) -> None:
        """Stop the worker and everything it started; the sandbox cannot be used afterwards."""
        self._end("the sandbox was shut down")

    def interrupt(self) -> None:
        """Cancel: kill the worker at once; an execution in flight raises CodeInterpreterError."""
        self._mark_ended("sandbox execution cancelled")
        self._inbox.put(_CANCELLED)
        self._kill()

    def __enter__(self) -> LocalSandbox:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.shutdown()

    # -- execution --------------------------------------------------------------------------------

    def __call__(self, code: str, variables: dict[str, Any] | None = None) -> Any:
        return self.execute(code, variables)

    @fires_dspy_callbacks
    def execute(self, code: str, variables: dict[str, Any] | None = None) -> Any:
        if not self._execute_lock.acquire(blocking=False):
            raise CodeInterpreterError("the sandbox already has an active execution")
        try:
            return self._execute(code, variables or {})
        finally:
            self._execute_lock.release()

    def _execute(self, code: str, variables: dict[str, Any]) -> Any:
        if not isinstance(code, str):
            raise InvalidInterpreterInput(f"code must be a string, not {type(code).__name__}")
        if not isinstance(variables, dict):
            raise InvalidInterpreterInput(f"variables must be a dict, not {type(variables).__name__}")
        tools = dict(self.tools)
        check_tool_names(tools)
        check_output_fields(self.output_fields)
        plan = self._variables.plan(variables, set(tools))
        self._check_usable()
        if self._worker is None:  # started lazily, as DSPy's interpreters are (firing the startup callbacks once)
            self.start()
        self._execution += 1
        timeout = self.spec.limits.execution_timeout
        header = {
            "type": "execute",
            "execution": self._execution,
            "code": code,
            "tools": list(tools),
            "output_fields": self.output_fields,
            "timeout": timeout,
            "return_value": self.return_trailing_value,
        }
        message = execute_message(header, plan)
        assert self._pump is not None
        self._pump.begin()
        deadline = time.monotonic() + timeout + self._interrupt_grace
        self._active = _ActiveExecution(self._execution, tools, contextvars.copy_context(), deadline)
        try:
            self._send(message, deadline)
            self._variables.commit(plan)
            reply = self._await_result(self._execution, time.monotonic() + timeout + self._interrupt_grace)
        except SandboxCrashed as crash:
            crash.output = self._pump.finish().result() or ""
            raise
        finally:
            self._active = None
        output = self._pump.finish()
        notice = self._worker.limit_notice() if self._worker is not None else None
        if notice:  # e.g. the kernel killed one of the code's processes at the memory limit
            self._observer.warning(notice)
            output.note(notice)
        return self._outcome(reply, output, timeout)

    def _await_result(self, execution: int, deadline: float) -> dict[str, Any]:
        while True:
            message = self._next_message(deadline)
            if message is None:
                timeout = self.spec.limits.execution_timeout
                self._crash(
                    f"execution exceeded execution timeout of {timeout:g} seconds and did not stop when "
                    "interrupted; the sandbox worker was stopped",
                    f"the code ran past the {timeout:g}s timeout and did not stop when interrupted",
                )
            if not isinstance(message, dict):
                self._died()  # shut down, cancelled, or it died
            if message["type"] == "result" and message.get("execution") == execution:
                return message
            if message["type"] == "fatal":
                error = message.get("error")
                self._crash(f"the sandbox worker failed: {error}", f"a protocol error ({error})")

    def _running_execution(self) -> int | None:
        active = self._active
        return active.execution if active is not None else None

    def _take_tool_call(self, request: dict[str, Any]) -> bool:
        """Answer a tool call on one of the sandbox's few tool workers (waiting for a free one, so a
        flood of calls holds back the sandbox, not the host); False when the sandbox is ending."""
        return self._tool_workers.run(lambda: self._answer_tool_call(request))

    def _answer_tool_call(self, request: dict[str, Any]) -> None:
        """Run a tool call in the context of the execute() that is running, or refuse it."""
        active = self._active
        if active is None or request.get("execution") != active.execution:
            error = "host tools can only be called while an execution is running"
            refusal = encode_message({"type": "tool_error", "id": request.get("id"), "error": error})
            with contextlib.suppress(CodeInterpreterError):
                self._send(refusal, time.monotonic() + self._interrupt_grace)
            return
        active.context.copy().run(self._serve_tool, active, request)

    def _serve_tool(self, active: _ActiveExecution, request: dict[str, Any]) -> None:
        _CALL_TOOLS.set(active.tools)
        reply = run_tool_call(active.tools, request, self._observer, self.invoke_tool)
        with contextlib.suppress(CodeInterpreterError):  # the worker is gone; execute() reports that
            self._send(reply, max(active.deadline, time.monotonic() + self._interrupt_grace))

    @fires_dspy_callbacks
    def invoke_tool(self, tool_name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call one host tool as sandbox code called it (the tools of the execution that called it,
        else the current ``tools``); DSPy's interpreters name this method so, for its callbacks."""
        tools = _CALL_TOOLS.get()
        return invoke(self.tools if tools is None else tools, tool_name, args, kwargs)

    def _outcome(self, reply: dict[str, Any], output: CappedText, timeout: float) -> Any:
        status = reply.get("status")
        if notice := builtins_notice(reply.get("builtins_restored")):
            output.note(notice)
        text = output.result()
        printed = f"{text}\n" if text else ""
        if status == "ok":
            return reply.get("value", text)
        if status == "final":
            return FinalOutput(reply.get("value"))
        if status == "syntax":
            line = reply.get("line")
            raise CodeSyntaxError(str(reply.get("error")), line if isinstance(line, int) else None)
        if status == "timeout":
            message = f"execution interrupted: it exceeded execution timeout of {timeout:g} seconds"
            raise CodeFailed(f"{printed}{message}", error_type="TimeoutError", message=message, line=None)
        if status == "error":
            described = str(reply.get("error"))
            line = reply.get("line")
            raise CodeFailed(
                f"{printed}{described}",
                error_type=str(reply.get("error_type") or "Exception"),
                message=str(reply.get("message") or ""),
                line=line if isinstance(line, int) else None,
                traceback=described,
            )
        self._crash(f"the sandbox worker sent an unknown result: {reply!r}", "a protocol error (an unknown result)")

    # -- plumbing ---------------------------------------------------------------------------------

    def _send(self, data: bytes, deadline: float) -> None:
        """Write one message by ``deadline``: a worker that leaves it unread that long (its reader
        stopped, or its code flooded the host with calls it never reads the answers to) is stopped,
        so no host thread waits on it for ever."""
        # Failing kills the worker, which takes the send lock: fail only once it is released.
        if not self._send_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            self._stopped_reading()
        try:
            worker = self._worker
            if worker is None or worker.command_fd < 0:
                failure: str | None = self._ended or "the sandbox worker is not running"
            else:
                try:
                    written = write_by(worker.command_fd, data, deadline)
                except OSError:
                    failure = ""
                else:
                    failure = None if written else "unread"
                    self.bytes_sent += len(data) if written else 0
        finally:
            self._send_lock.release()
        if failure == "unread":
            self._stopped_reading()
        if failure == "":
            self._died()  # the pipe broke: the worker is gone (or was cancelled meanwhile)
        if failure is not None:
            self._fail(failure)

    def _stopped_reading(self) -> NoReturn:
        self._crash(
            "the sandbox worker left the host's messages unread until their deadline (its code stopped "
            "reading, or flooded the host with calls it never read the answers to); the sandbox worker was stopped",
            "it stopped reading the host's messages",
        )

    def _next_message(self, deadline: float) -> Any:
        """The next message from the worker, replies.CLOSED or _CANCELLED, or None at the deadline."""
        try:
            return self._inbox.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None

    def _check_usable(self) -> None:
        if self._ended:
            self._raise_ended()

    def _mark_ended(self, reason: str, crash_cause: str | None = None) -> None:
        """Record why the sandbox ended; only the first reason counts (a cancel that came first is
        no crash, and a crash seen first by a tool thread is still one for the execution)."""
        with self._end_lock:
            if self._ended is None:
                self._ended, self._crash_cause = reason, crash_cause

    def _raise_ended(self) -> NoReturn:
        reason = self._ended or "the sandbox ended"
        if self._crash_cause is not None:
            raise SandboxCrashed(reason, cause=self._crash_cause)
        raise CodeInterpreterError(reason)

    def _end(self, reason: str) -> None:
        self._mark_ended(reason)
        self._kill()

    def _fail(self, reason: str) -> NoReturn:
        self._end(reason)
        self._raise_ended()

    def _crash(self, reason: str, cause: str) -> NoReturn:
        """The worker died or broke its protocol by itself (unless a cancel or shutdown came first)."""
        self._mark_ended(reason, cause)
        self._kill()
        self._raise_ended()

    def _died(self) -> NoReturn:
        if self._ended is not None:  # cancelled, shut down, or its crash is already known
            self._fail(self._ended)
        status, signal_name = self._exit()
        limit = self._worker.limit_hit() if self._worker is not None else None
        if signal_name is None:
            cause = status if status.startswith("exit status") else "its protocol pipe closed"
        elif signal_name == "SIGXCPU":
            cause = f"SIGXCPU at the {self.spec.limits.cpu_seconds}s CPU time limit"
        else:
            cause = f"{signal_name} at {limit}" if limit and signal_name == "SIGKILL" else signal_name
        self._crash(self._death_reason(status), cause)

    def _kill(self) -> None:
        with self._kill_lock:
            worker = self._worker
            if worker is None or self._killed:
                return
            self._killed = True
            self._tool_workers.close()  # the reader stops waiting for a free tool worker
            worker.kill_everything()  # every process in the sandbox's cgroups, wherever it went
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(worker.process.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                worker.process.kill()
            with contextlib.suppress(Exception):
                worker.process.wait(timeout=5)
            with self._send_lock:
                if worker.command_fd >= 0:
                    os.close(worker.command_fd)
                    worker.command_fd = -1
            if self._pump is not None:
                self._pump.close()
            worker.release()

    def _exit_status(self) -> str:
        return self._exit()[0]

    def _exit(self) -> tuple[str, str | None]:
        """How the worker ended ("exit status 3", "killed by SIGKILL"), and the signal's name if one killed it."""
        worker = self._worker
        if worker is None:
            return "not started", None
        try:
            code = worker.process.wait(timeout=1)
        except Exception:
            return "still running", None
        signum = -code if code < 0 else code - 128 if code > 128 and self.isolated else 0
        if signum:
            name = _signal_name(signum)
            return f"killed by {name}", name
        return f"exit status {code}", None

    def _death_reason(self, status: str) -> str:
        limits = self.spec.limits
        hint = ""
        limit = self._worker.limit_reason() if self._worker is not None else None
        if limit:
            hint = f"; {limit}"
        elif "SIGXCPU" in status:
            hint = f"; it used up its CPU time limit of {limits.cpu_seconds}s"
        elif "SIGKILL" in status:
            hint = "; by its own code, the out-of-memory killer or the hard CPU time limit"
        return f"the sandbox worker exited unexpectedly ({status}{hint}); its state is lost"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def check_output_fields(fields: list[dict[str, Any]] | None) -> None:
    if fields is None:
        return
    if not isinstance(fields, list) or not all(isinstance(field, dict) for field in fields):
        raise InvalidInterpreterInput("output_fields must be a list of dicts with a 'name'")
    names = [field.get("name") for field in fields]
    if any(not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) for name in names):
        raise InvalidInterpreterInput(f"output field names must be Python identifiers: {names!r}")
    if len(names) != len(set(names)):
        raise InvalidInterpreterInput(f"output field names must be unique: {names!r}")
    try:
        json.dumps(fields)
    except (TypeError, ValueError) as exc:
        raise InvalidInterpreterInput(f"output fields must be JSON-compatible: {exc}") from exc


MAX_NAMED_BUILTINS = 12


def builtins_notice(restored: object) -> str:
    """The line the model reads after an execution that replaced builtins the worker then put back
    (the worker's list is hostile: only identifiers are named, a few of them)."""
    if not isinstance(restored, list) or not restored:
        return ""
    names = [name for name in restored if isinstance(name, str) and name.isidentifier() and len(name) <= 40]
    more = len(restored) - MAX_NAMED_BUILTINS
    shown = ", ".join(names[:MAX_NAMED_BUILTINS]) + (f" and {more} more" if more > 0 else "")
    return f"the code replaced builtins ({shown or 'unnamed'}); Python's own are back for the next execution"
