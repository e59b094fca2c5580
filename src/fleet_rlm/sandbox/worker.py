"""The Python worker that runs inside a sandbox (standard library only; never imports fleet_rlm).

Started as ``python -I worker.py uid=U gid=G cmd_fd=3 reply_fd=4 ...``. It drops to the sandbox
uid first thing, then speaks JSON lines with the host: commands arrive on ``cmd_fd``, replies
leave on ``reply_fd``. The code's stdout/stderr are the process's own fds 1 and 2, which the host
reads directly, so output from subprocesses and C code is captured and streams while code runs.

Code runs in the main thread, where a timer's signal can interrupt it at its deadline.
Host tools are proxies that send a ``tool_call`` and wait for the matching reply; several threads
may call tools at once.
"""

from __future__ import annotations

import _ast
import builtins
import errno
import itertools
import json
import keyword
import os
import queue
import signal
import sys
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds of start-up, and start-up is on every sandbox's clock
    from typing import Any

ONLY_AST = 0x400  # ast.PyCF_ONLY_AST, without importing ast

SIMPLE_TYPE_CHECKS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "list": (list, tuple),
    "dict": (dict,),
    "NoneType": (type(None),),
}
RESERVED_NAMES = frozenset({"SUBMIT", "__builtins__"})
MAX_MESSAGE_CHARS = 2000
MAX_LISTED_MODULES = 40
STDLIB_FOR_DATA = ("csv", "json", "sqlite3", "statistics", "collections", "re", "math", "decimal", "datetime")


class Submission(BaseException):
    """Raised by SUBMIT to end an execution with a final answer."""

    def __init__(self, value: dict[str, Any]) -> None:
        self.value = value


class Waiter:
    """One pending tool call: the asking thread blocks until the reader delivers the reply."""

    __slots__ = ("_lock", "reply")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.reply: dict[str, Any] | None = None

    def deliver(self, reply: dict[str, Any] | None) -> None:
        self.reply = reply
        self._lock.release()

    def wait(self) -> dict[str, Any] | None:
        self._lock.acquire()  # interruptible: the deadline's KeyboardInterrupt lands here too
        return self.reply


class Channel:
    """JSON lines to and from the host; tool replies are routed to the thread that asked."""

    def __init__(self, cmd_fd: int, reply_fd: int) -> None:
        self._reader = os.fdopen(cmd_fd, "rb")
        self._reply_fd = reply_fd
        self._send_lock = threading.Lock()
        self._pending: dict[int, Waiter] = {}
        self._pending_lock = threading.Lock()
        self._ids = itertools.count(1)
        self.commands: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.owner_pid = os.getpid()
        threading.Thread(target=self._read, name="fleet-channel", daemon=True).start()

    def _read(self) -> None:
        try:
            for line in self._reader:
                message = json.loads(line.decode("utf-8", "surrogatepass"))
                if message.get("type") in ("tool_result", "tool_error"):
                    with self._pending_lock:
                        waiter = self._pending.pop(message.get("id"), None)
                    if waiter is not None:  # else: the caller gave up (timeout); drop the late reply
                        waiter.deliver(message)
                else:
                    self.commands.put(message)
        except Exception as exc:  # a broken pipe or a malformed line: the session cannot continue
            self.commands.put({"type": "protocol_error", "error": f"{type(exc).__name__}: {exc}"})
        self.commands.put(None)
        with self._pending_lock:
            waiters, self._pending = list(self._pending.values()), {}
        for waiter in waiters:
            waiter.deliver(None)

    def send(self, message: dict[str, Any]) -> None:
        self.send_encoded(encode(message))

    def send_encoded(self, data: bytes) -> None:
        view = memoryview(data)
        with self._send_lock:
            while view:
                view = view[os.write(self._reply_fd, view) :]

    def call_tool(self, execution: int, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if os.getpid() != self.owner_pid:
            raise RuntimeError(f"host tool {name!r} can only be called from the sandbox's main process")
        call_id = next(self._ids)
        request = {"type": "tool_call", "id": call_id, "execution": execution, "name": name, "args": args}
        request["kwargs"] = kwargs
        try:
            data = encode(request)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"arguments to host tool {name!r} must be JSON-compatible: {exc}") from None
        waiter = Waiter()
        with self._pending_lock:
            self._pending[call_id] = waiter
        try:
            self.send_encoded(data)
            reply = waiter.wait()
        finally:
            with self._pending_lock:
                self._pending.pop(call_id, None)
        if reply is None:
            raise RuntimeError(f"host tool {name!r} got no answer: the host closed the connection")
        if reply["type"] == "tool_error":
            raise RuntimeError(reply.get("error", "host tool failed"))
        return reply.get("value")


def encode(message: dict[str, Any]) -> bytes:
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "surrogatepass") + b"\n"


class Watchdog:
    """Interrupts running code at its deadline: a real-time timer whose SIGALRM raises
    KeyboardInterrupt in the main thread, where the code runs (one syscall to arm, no thread)."""

    def __init__(self) -> None:
        self.running_user_code = False
        self.fired = False
        signal.signal(signal.SIGALRM, self._on_alarm)

    def arm(self, timeout: float | None) -> None:
        self.fired = False
        if timeout:
            signal.setitimer(signal.ITIMER_REAL, timeout)

    def disarm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)

    def _on_alarm(self, signum: int, frame: object) -> None:
        # Only while user code runs: the deadline landing in the worker's own bookkeeping is ignored.
        if self.running_user_code and not self.fired:
            self.fired = True
            raise KeyboardInterrupt


class Session:
    """One persistent namespace plus the cached input variables the host does not resend."""

    def __init__(self, channel: Channel, settings: dict[str, str]) -> None:
        self.channel = channel
        self.limits = settings
        self.watchdog = Watchdog()
        self.namespace: dict[str, Any] = {"__builtins__": builtins, "__name__": "__main__"}
        self.tool_names: set[str] = set()
        self.output_fields: list[dict[str, Any]] | None = None
        self.held: dict[str, tuple[bool, Any]] = {}  # name -> (is_json_text, value)
        self.execution = 0
        self.sources: dict[str, str] = {}  # per execution, so tracebacks can show the lines
        self.pid = os.getpid()
        self.namespace["SUBMIT"] = self.submit

    # -- per-execution setup -------------------------------------------------------------------

    def configure(self, request: dict[str, Any]) -> None:
        for name in self.tool_names - set(request["tools"]):
            self.namespace.pop(name, None)
        self.tool_names = set(request["tools"])
        for name in self.tool_names:
            self.namespace[name] = self._tool_proxy(name)
        self.output_fields = request.get("output_fields")
        self.namespace["SUBMIT"] = self.submit
        self._bind_variables(request)

    def _tool_proxy(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            return self.channel.call_tool(self.execution, name, args, kwargs)

        call.__name__ = call.__qualname__ = name
        return call

    def _bind_variables(self, request: dict[str, Any]) -> None:
        for name in request.get("forget", ()):
            self.held.pop(name, None)
        fresh: dict[str, Any] = dict(request.get("variables", {}))
        for name, encoded in request.get("bytes_variables", {}).items():
            import base64

            fresh[name] = base64.b64decode(encoded)
        for name, value in fresh.items():
            mutable = isinstance(value, (list, dict))
            # Mutable inputs are kept as JSON text so every execution starts from the value the host
            # sent, as if it had been resent, even when earlier code mutated it in place.
            self.held[name] = (True, json.dumps(value)) if mutable else (False, value)
            self.namespace[name] = value
        for name in request.get("reuse", ()):
            is_text, value = self.held[name]
            self.namespace[name] = json.loads(value) if is_text else value

    # -- SUBMIT ---------------------------------------------------------------------------------

    def submit(self, *args: Any, **kwargs: Any) -> None:
        fields = self.output_fields
        if fields is None:
            if len(args) != 1 or kwargs:
                raise TypeError("SUBMIT takes exactly one value")
            raise Submission({"output": args[0]})
        names = [field["name"] for field in fields]
        usage = f"SUBMIT({', '.join(names)})"
        if args and kwargs:
            raise TypeError(f"SUBMIT takes positional or keyword values, not both; use {usage}")
        if len(args) > len(names):
            raise TypeError(f"SUBMIT got {len(args)} values but expects {len(names)}; use {usage}")
        values = dict(zip(names, args, strict=False)) if args else dict(kwargs)
        missing = [name for name in names if name not in values]
        if missing:
            raise TypeError(f"SUBMIT is missing {', '.join(missing)}; use {usage}")
        unexpected = [name for name in values if name not in names]
        if unexpected:
            raise TypeError(f"SUBMIT got unexpected {', '.join(unexpected)}; use {usage}")
        for field in fields:
            expected = field.get("type")
            value = values[field["name"]]
            allowed = SIMPLE_TYPE_CHECKS.get(expected or "")
            if allowed and (not isinstance(value, allowed) or (isinstance(value, bool) and expected != "bool")):
                shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
                raise TypeError(
                    f"SUBMIT field {field['name']!r} must be {expected}, got {type(value).__name__}: {shown}"
                )
        raise Submission(values)

    # -- running code ---------------------------------------------------------------------------

    def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.execution == 0 and "workdir" in self.limits:
            os.chdir(self.limits["workdir"])
            os.environ["PWD"] = self.limits["workdir"]
        self.execution = request["execution"]
        self.configure(request)
        filename = f"<execution {self.execution}>"
        code: str = request["code"]
        try:
            tree = compile(code, filename, "exec", ONLY_AST)
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], _ast.Expr) else None
            body = compile(tree, filename, "exec")
            tail = compile(_ast.Expression(last.value), filename, "eval") if last else None
        except SyntaxError as exc:
            return {"status": "syntax", "error": describe_syntax_error(exc), "line": exc.lineno}
        self.sources[filename] = code
        self.watchdog.arm(request.get("timeout"))
        try:
            outcome = self._run(body, tail, bool(request.get("return_value")))
        except KeyboardInterrupt:  # the deadline landed between user code and bookkeeping
            outcome = {"status": "timeout"}
        finally:
            self.watchdog.disarm()
        if os.getpid() != self.pid:  # a fork of the worker finished running the code: it must not reply
            os._exit(0 if outcome["status"] in ("ok", "final") else 1)
        return outcome

    def _run(self, body: Any, tail: Any, return_value: bool) -> dict[str, Any]:
        watchdog = self.watchdog
        try:
            watchdog.running_user_code = True
            exec(body, self.namespace)
            value = eval(tail, self.namespace) if tail is not None else None
            watchdog.running_user_code = False
            if value is None:
                return {"status": "ok"}
            if return_value:  # as DSPy's interpreters do
                return {"status": "ok", "value": jsonable(value)}
            sys.stdout.write(repr(value) + "\n")  # like a REPL: show the value of a trailing expression
            return {"status": "ok"}
        except Submission as submission:
            watchdog.running_user_code = False
            return {"status": "final", "value": {k: jsonable(v) for k, v in submission.value.items()}}
        except KeyboardInterrupt as exc:
            watchdog.running_user_code = False
            if watchdog.fired:
                return {"status": "timeout"}
            return self.failure(exc)
        except BaseException as exc:
            watchdog.running_user_code = False
            return self.failure(exc)

    def failure(self, exc: BaseException) -> dict[str, Any]:
        """The error reply: the trimmed traceback the model sees, and its parts for the person."""
        line = None
        tb = exc.__traceback__
        current = f"<execution {self.execution}>"
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == current:
                line = tb.tb_lineno
            tb = tb.tb_next
        try:
            message = str(exc)
        except Exception:  # a guest exception whose __str__ fails
            message = ""
        return {
            "status": "error",
            "error": self.describe(exc),
            "error_type": type(exc).__name__,
            "message": message[:MAX_MESSAGE_CHARS],
            "line": line,
        }

    def describe(self, exc: BaseException) -> str:
        """A traceback of the user's frames only, with a hint when a sandbox limit was hit."""
        import linecache
        import traceback

        for filename, code in self.sources.items():
            linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        frames = traceback.extract_tb(exc.__traceback__)
        user_frames = [frame for frame in frames if frame.filename != __file__]
        lines = traceback.format_list(user_frames)
        text = "".join(["Traceback (most recent call last):\n", *lines] if lines else [])
        text += "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
        hint = self._limit_hint(exc)
        return f"{text}\n({hint})" if hint else text

    def _limit_hint(self, exc: BaseException) -> str | None:
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            return missing_module_hint(exc.name)
        if isinstance(exc, MemoryError):
            return f"the sandbox memory limit is {self.limits.get('memory_mb', '?')} MB"
        if (isinstance(exc, OSError) and exc.errno == errno.EAGAIN) or "can't start new thread" in str(exc):
            return f"the sandbox may run at most {self.limits.get('max_processes', '?')} processes and threads"
        if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
            return f"the sandbox file size limit is {self.limits.get('max_file_size_mb', '?')} MB"
        return None


def missing_module_hint(name: str) -> str:
    """What the model can import instead of a module that is not there (no import is attempted)."""
    import difflib
    import pkgutil

    top = name.split(".", 1)[0]
    stdlib = set(sys.stdlib_module_names)
    installed = sorted({m.name for m in pkgutil.iter_modules() if not m.name.startswith("_")} - stdlib)
    close = difflib.get_close_matches(top, [*installed, *sorted(stdlib)], n=3, cutoff=0.75)
    parts = [f"{top!r} is not installed in the sandbox and cannot be installed (there is no network)"]
    if close:
        parts.append(f"close matches that are available: {', '.join(close)}")
    useful = [m for m in STDLIB_FOR_DATA if m in stdlib]
    parts.append(f"the standard library is available ({', '.join(useful)}, ...)")
    shown = installed[:MAX_LISTED_MODULES]
    more = f" and {len(installed) - len(shown)} more" if len(installed) > len(shown) else ""
    parts.append(f"other installed packages: {', '.join(shown) or 'none'}{more}")
    return "; ".join(parts)


def describe_syntax_error(exc: SyntaxError) -> str:
    where = f"line {exc.lineno}" if exc.lineno else "unknown line"
    text = (exc.text or "").rstrip()
    return f"{exc.msg} ({where})" + (f":\n    {text}" if text else "")


def jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def drop_privileges(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    # Every sandbox of a workspace runs as a uid of its own: what one writes, the next may change.
    os.umask(0)


def parse_arguments(argv: list[str]) -> dict[str, str]:
    return dict(argument.split("=", 1) for argument in argv)


def validate_request(request: dict[str, Any]) -> None:
    names = list(request["tools"]) + list(request.get("variables", {})) + list(request.get("bytes_variables", {}))
    bad = [n for n in names if not n.isidentifier() or keyword.iskeyword(n) or n in RESERVED_NAMES]
    if bad:
        raise ValueError(f"invalid names: {bad!r}")


def main() -> None:
    arguments = parse_arguments(sys.argv[1:])
    if "uid" in arguments:
        drop_privileges(int(arguments["uid"]), int(arguments["gid"]))
    for stream in (sys.stdout, sys.stderr):  # whole lines reach the host as soon as they are printed
        stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    cmd_fd, reply_fd = int(arguments["cmd_fd"]), int(arguments["reply_fd"])
    for fd in (cmd_fd, reply_fd):
        os.set_inheritable(fd, False)
    channel = Channel(cmd_fd, reply_fd)
    session = Session(channel, arguments)
    channel.send({"type": "ready", "pid": os.getpid(), "uid": os.getuid()})
    while True:
        request = channel.commands.get()
        if request is None or request["type"] == "shutdown":
            return
        if request["type"] == "protocol_error":
            channel.send({"type": "fatal", "error": request["error"]})
            return
        try:
            validate_request(request)
            outcome = session.execute(request)
        except Exception as exc:
            channel.send({"type": "fatal", "error": f"{type(exc).__name__}: {exc}"})
            return
        outcome.update(type="result", execution=request["execution"])
        flush_output()
        channel.send(outcome)


def flush_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - contextlib is not imported, to keep start-up short
            stream.flush()
        except Exception:
            pass


if __name__ == "__main__":
    main()
