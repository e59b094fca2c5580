"""The Python worker that runs inside a sandbox (standard library only; never imports fleet_rlm).

Started as ``python -I worker.py uid=U gid=G cmd_fd=3 reply_fd=4 ...``. It drops to the sandbox
uid first thing, then speaks JSON lines with the host: commands arrive on ``cmd_fd``, replies
leave on ``reply_fd``. The code's stdout/stderr are the process's own fds 1 and 2, which the host
reads directly, so output from subprocesses and C code is captured and streams while code runs.

Code runs in the main thread, where a timer's signal can interrupt it at its deadline.
Host tools are proxies that send a ``tool_call`` and wait for the matching reply; several threads
may call tools at once.

The code runs in this very process, so nothing it changes may reach the worker's own path (see
docs/sandbox.md, "What the code cannot break"): the worker looks builtins up in a private copy,
speaks JSON through the C codec directly, uses C-level threads, locks and queues, holds its own
references to the functions it calls, keeps the protocol on private fds far above the code's, and
after each execution puts back fds 0-2, the standard streams and the signal handlers it relies on.
"""

from __future__ import annotations

import _io
import _json
import _thread
import builtins
import errno
import itertools
import os
import sys
from _ast import Expr as AstExpr
from _ast import Expression as AstExpression
from _queue import SimpleQueue
from binascii import a2b_base64
from keyword import iskeyword
from numbers import Real

# Every function below looks names up in this copy, taken before any sandbox code runs: code that
# sets builtins.len = None changes what it sees itself (and the standard library), not the worker.
globals()["__builtins__"] = dict(vars(builtins))

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds of start-up, and start-up is on every sandbox's clock
    import signal as _signal  # the same functions; _signal has no type stubs
    from typing import Any
else:
    import _signal  # signal itself wraps these in Python code (and imports enum)

# Bound once, so code that replaces os.write or os.getpid does not reach the worker's own calls.
os_write, os_getpid, os_exit, os_dup2 = os.write, os.getpid, os._exit, os.dup2
signal_set, set_timer, unblock_signals = _signal.signal, _signal.setitimer, _signal.pthread_sigmask
make_json_encoder, encode_json_string = _json.make_encoder, _json.encode_basestring

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
PRIVATE_FD_CEILING = 1024  # the worker's own fds sit just below this (or the fd limit, if lower)
STDLIB_FOR_DATA = ("csv", "json", "sqlite3", "statistics", "collections", "re", "math", "decimal", "datetime")


class DecoderSettings:
    """What the C scanner reads from a ``json.JSONDecoder``: its defaults (NaN and Infinity included)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.__getitem__


def refuse_value(value: object) -> None:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def encode_json(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` without the json module's Python code."""
    encoder = make_json_encoder({}, refuse_value, encode_json_string, None, ":", ",", False, False, True)
    return "".join(encoder(value, 0))


def decode_json(text: str) -> Any:
    """One JSON value at the start of ``text`` (protocol lines hold exactly one)."""
    return scan_json(text, 0)[0]


# Shared by the threads: a scan holds the GIL from start to end (its settings call no Python code).
scan_json = _json.make_scanner(DecoderSettings())  # type: ignore[arg-type]


def mistyped_field_message(name: str, expected: str, value: Any) -> str:
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    message = f"SUBMIT field {name!r} must be {expected}, got {type(value).__name__}: {shown}"
    if value is None:
        message += (
            "; the expression passed returned nothing (calls such as df.to_csv(path) or f.write(...) "
            f"return None): compute the answer first, then SUBMIT({name}=<the answer itself>)"
        )
    elif expected == "str":
        message += f"; pass its text, e.g. SUBMIT({name}=str(value))"
    return message


def computed_text(value: Any) -> str | None:
    """The text a computed value gives a text field of SUBMIT, or None to refuse it: a figure exactly
    (numpy's too), a pandas table or series as it prints (``to_string()``, in a fenced block), a numpy
    array, list, tuple or dict as it prints. Refusing them cost small models the turn: a 1.5B model sent
    ``SUBMIT(region_revenue)``, a DataFrame, four times. A bool is not a figure (numpy 1 names its type
    bool_), and a None is explained instead."""
    kind = type(value)
    if isinstance(value, Real):
        return None if kind.__name__ in ("bool", "bool_") else str(value)
    pandas = any(str(getattr(base, "__module__", "")).split(".", 1)[0] == "pandas" for base in kind.__mro__)
    if pandas and callable(getattr(value, "to_string", None)):
        return f"```\n{value.to_string()}\n```"  # a block, so that the answer's Markdown keeps its lines
    if kind in (list, tuple, dict) or (kind.__module__ == "numpy" and kind.__name__ == "ndarray"):
        return str(value)
    return None


class Submission(BaseException):
    """Raised by SUBMIT to end an execution with a final answer."""

    def __init__(self, value: dict[str, Any]) -> None:
        self.value = value


class Waiter:
    """One pending tool call: the asking thread blocks until the reader delivers the reply."""

    __slots__ = ("_lock", "reply")

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
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
        self._send_lock = _thread.allocate_lock()
        self._pending: dict[int, Waiter] = {}
        self._pending_lock = _thread.allocate_lock()
        self._ids = itertools.count(1)
        self.commands: SimpleQueue[dict[str, Any] | None] = SimpleQueue()
        self.owner_pid = os_getpid()
        _thread.start_new_thread(self._read, ())

    def _read(self) -> None:
        try:
            for line in self._reader:
                message = decode_json(line.decode("utf-8", "surrogatepass"))
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
                view = view[os_write(self._reply_fd, view) :]

    def call_tool(self, execution: int, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if os_getpid() != self.owner_pid:
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
    return encode_json(message).encode("utf-8", "surrogatepass") + b"\n"


class Watchdog:
    """Interrupts running code at its deadline: a real-time timer whose SIGALRM raises
    KeyboardInterrupt in the main thread, where the code runs (one syscall to arm, no thread).

    Before each execution the signal handling the worker relies on is put back, whatever earlier
    code did with it: this handler for SIGALRM, unblocked, and SIGPIPE and SIGXFSZ as Python set
    them (ignored, so a write past the file size limit is an OSError rather than the worker's end)."""

    def __init__(self) -> None:
        self.running_user_code = False
        self.fired = False
        self._handlers: dict[int, Any] = {_signal.SIGALRM: self._on_alarm}
        for signum in (_signal.SIGPIPE, _signal.SIGXFSZ):
            handler = _signal.getsignal(signum)
            if handler is not None:
                self._handlers[signum] = handler
        self._signals = tuple(self._handlers)
        self.restore_signals()

    def restore_signals(self) -> None:
        for signum, handler in self._handlers.items():
            signal_set(signum, handler)
        unblock_signals(_signal.SIG_UNBLOCK, self._signals)

    def arm(self, timeout: float | None) -> None:
        self.fired = False
        self.restore_signals()
        if timeout:
            set_timer(_signal.ITIMER_REAL, timeout)

    def disarm(self) -> None:
        set_timer(_signal.ITIMER_REAL, 0)

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
        self.pid = os_getpid()
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
        # Were it deleted, exec would fill in the worker's private builtins, for the code to change.
        self.namespace["__builtins__"] = builtins
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
            fresh[name] = a2b_base64(encoded)
        for name, value in fresh.items():
            mutable = isinstance(value, (list, dict))
            # Mutable inputs are kept as JSON text so every execution starts from the value the host
            # sent, as if it had been resent, even when earlier code mutated it in place.
            self.held[name] = (True, encode_json(value)) if mutable else (False, value)
            self.namespace[name] = value
        for name in request.get("reuse", ()):
            is_text, value = self.held[name]
            self.namespace[name] = decode_json(value) if is_text else value

    # -- SUBMIT ---------------------------------------------------------------------------------

    def submit(self, *args: Any, **kwargs: Any) -> None:
        fields = self.output_fields
        if fields is None:
            if len(args) != 1 or kwargs:
                raise TypeError("SUBMIT takes exactly one value")
            raise Submission({"output": jsonable(args[0])})
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
            name, expected = field["name"], field.get("type")
            value = values[name]
            if expected == "str":
                text = computed_text(value)
                if text is not None:
                    values[name] = value = text
            allowed = SIMPLE_TYPE_CHECKS.get(expected or "")
            if allowed and (not isinstance(value, allowed) or (isinstance(value, bool) and expected != "bool")):
                raise TypeError(mistyped_field_message(name, expected or "", value))
        # Converted here, in the code's own call and under its deadline: a failing __repr__ is its error.
        raise Submission({name: jsonable(value) for name, value in values.items()})

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
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], AstExpr) else None
            body = compile(tree, filename, "exec")
            tail = compile(AstExpression(last.value), filename, "eval") if last else None
        except SyntaxError as exc:
            return {"status": "syntax", "error": describe_syntax_error(exc), "line": exc.lineno}
        except (MemoryError, RecursionError) as exc:  # nested too deeply for the parser or the compiler
            error = f"the code could not be compiled: {type(exc).__name__} {message_of(exc)}".rstrip()
            return {"status": "syntax", "error": error, "line": None}
        self.sources[filename] = code
        self.watchdog.arm(request.get("timeout"))
        try:
            outcome = self._run(body, tail, bool(request.get("return_value")))
        except KeyboardInterrupt:  # the deadline landed between user code and bookkeeping
            outcome = {"status": "timeout"}
        finally:
            self.watchdog.disarm()
        if os_getpid() != self.pid:  # a fork of the worker finished running the code: it must not reply
            os_exit(0 if outcome["status"] in ("ok", "final") else 1)
        return outcome

    def _run(self, body: Any, tail: Any, return_value: bool) -> dict[str, Any]:
        watchdog = self.watchdog
        try:
            watchdog.running_user_code = True
            exec(body, self.namespace)
            outcome: dict[str, Any] = {"status": "ok"}
            value = eval(tail, self.namespace) if tail is not None else None
            if value is not None and return_value:  # as DSPy's interpreters do
                outcome["value"] = jsonable(value)
            elif value is not None:  # like a REPL: show the value of a trailing expression
                sys.stdout.write(repr(value) + "\n")
            watchdog.running_user_code = False
            return outcome
        except Submission as submission:
            watchdog.running_user_code = False
            return {"status": "final", "value": submission.value}
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
        return {
            "status": "error",
            "error": self.describe(exc),
            "error_type": type(exc).__name__,
            "message": message_of(exc)[:MAX_MESSAGE_CHARS],
            "line": line,
        }

    def describe(self, exc: BaseException) -> str:
        """A traceback of the user's frames only, with a hint when a sandbox limit was hit."""
        try:
            text = self._formatted(exc)
        except BaseException:  # the code broke what traceback needs (builtins, sys.modules): a plain one
            text = self._plain(exc)
        try:
            hint = self._limit_hint(exc)
        except BaseException:
            hint = None
        return f"{text}\n({hint})" if hint else text

    def _formatted(self, exc: BaseException) -> str:
        import linecache
        import traceback

        for filename, code in self.sources.items():
            linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        frames = traceback.extract_tb(exc.__traceback__)
        user_frames = [frame for frame in frames if frame.filename != __file__]
        lines = traceback.format_list(user_frames)
        text = "".join(["Traceback (most recent call last):\n", *lines] if lines else [])
        return text + "".join(traceback.format_exception_only(type(exc), exc)).rstrip()

    def _plain(self, exc: BaseException) -> str:
        """The traceback without the traceback module: each frame of the code with its line."""
        lines = []
        tb = exc.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename != __file__:
                lines.append(f'  File "{code.co_filename}", line {tb.tb_lineno}, in {code.co_name}\n')
                source = self.sources.get(code.co_filename, "").splitlines()
                if 0 < (tb.tb_lineno or 0) <= len(source):
                    lines.append(f"    {source[tb.tb_lineno - 1].strip()}\n")
            tb = tb.tb_next
        head = "Traceback (most recent call last):\n" if lines else ""
        message = message_of(exc)
        return f"{head}{''.join(lines)}{type(exc).__name__}{': ' if message else ''}{message}"

    def _limit_hint(self, exc: BaseException) -> str | None:
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            return missing_module_hint(exc.name)
        if isinstance(exc, MemoryError):
            return f"the sandbox memory limit is {self.limits.get('memory_mb', '?')} MB"
        if (isinstance(exc, OSError) and exc.errno == errno.EAGAIN) or "can't start new thread" in message_of(exc):
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


def message_of(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a guest exception whose __str__ fails
        return ""


def describe_syntax_error(exc: SyntaxError) -> str:
    where = f"line {exc.lineno}" if exc.lineno else "unknown line"
    text = (exc.text or "").rstrip()
    return f"{exc.msg} ({where})" + (f":\n    {text}" if text else "")


def jsonable(value: Any) -> Any:
    try:
        encode_json(value)
        return value
    except Exception:  # not JSON (or too deeply nested): its repr, which may raise in the code's face
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
    bad = [n for n in names if not n.isidentifier() or iskeyword(n) or n in RESERVED_NAMES]
    if bad:
        raise ValueError(f"invalid names: {bad!r}")


class PrivateFds:
    """Where the worker keeps fds of its own: just below the fd limit (at most 1024), far above any the
    code opens, so code that closes low fds wholesale (``os.closerange(3, 256)``) leaves them alone."""

    def __init__(self) -> None:
        limit = os.sysconf("SC_OPEN_MAX")
        self._next = min(limit if limit > 0 else PRIVATE_FD_CEILING, PRIVATE_FD_CEILING) - 1

    def copy(self, fd: int) -> int:
        """A close-on-exec copy of ``fd`` on a private number."""
        while self._next > fd and is_open(self._next):
            self._next -= 1
        if self._next <= fd:  # no room above: wherever the kernel puts it
            return os.dup(fd)
        self._next -= 1
        return os_dup2(fd, self._next + 1, inheritable=False)

    def move(self, fd: int) -> int:
        moved = self.copy(fd)
        os.close(fd)
        return moved


class KeptBuiltins:
    """The ``builtins`` module as the worker started, put back after each execution.

    Code may replace a builtin (``builtins.len = None``) or delete one; that holds for the rest of its
    execution, and the next one starts with Python's own again: a namespace whose ``len`` is gone
    would fail every later execution of the session, with no way back the model knows of. Builtins the
    code added are left alone."""

    def __init__(self) -> None:
        self._original = dict(vars(builtins))

    def restore(self) -> list[str]:
        """Put back every builtin the code replaced or deleted; returns their names."""
        current = vars(builtins)
        changed = sorted(name for name, value in self._original.items() if current.get(name, current) is not value)
        for name in changed:
            current[name] = self._original[name]
        return changed


class StandardStreams:
    """fds 0-2 and ``sys.stdin/stdout/stderr`` as the worker started, put back after each execution.

    Code may close them, ``dup2`` a file over them, replace the ``sys`` objects or patch their
    methods: that holds for the rest of its execution, and the next one starts with the host's pipes
    again (the worker keeps copies on private fds) and streams that write to them."""

    NAMES = ("stdin", "stdout", "stderr")

    def __init__(self, private: PrivateFds) -> None:
        for stream in (sys.stdout, sys.stderr):  # whole lines reach the host as soon as they are printed
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        self._fds = [(fd, private.copy(fd)) for fd in (0, 1, 2)]
        self._streams: list[Any] = [getattr(sys, name) for name in self.NAMES]
        self._formats = [(stream.encoding, stream.errors) for stream in self._streams]
        self._attributes = [dict(vars(stream)) for stream in self._streams]

    def restore(self) -> None:
        for fd, copy in self._fds:  # always: a file dup2-ed over fd 0 may even be the same /dev/null
            try:  # noqa: SIM105 - contextlib is not imported, to keep start-up short
                os_dup2(copy, fd)
            except OSError:
                pass
        for index, name in enumerate(self.NAMES):
            stream = self._streams[index]
            if stream.closed:
                try:
                    stream = self._streams[index] = self._reopen(index)
                except Exception:  # out of memory, say: the reply matters more than the stream
                    continue
            attributes = vars(stream)  # e.g. sys.stdout.write = capture, left behind
            attributes.clear()
            attributes.update(self._attributes[index])
            setattr(sys, name, stream)
            setattr(sys, f"__{name}__", stream)
        for stream in self._streams[1:]:
            try:  # noqa: SIM105
                stream.flush()
            except Exception:
                pass

    def _reopen(self, index: int) -> Any:
        encoding, errors = self._formats[index]
        mode, buffering = ("r", -1) if index == 0 else ("w", 1)
        return _io.open(index, mode, buffering, encoding, errors, closefd=False)


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def next_command(channel: Channel) -> dict[str, Any] | None:
    """The next command; a signal handler the code left behind that raises while the worker waits is ignored."""
    while True:
        try:
            return channel.commands.get()
        except BaseException:
            continue


def encode_result(outcome: dict[str, Any], execution: int) -> bytes:
    outcome.update(type="result", execution=execution)
    try:
        return encode(outcome)
    except Exception as exc:  # e.g. a value the code changed after SUBMIT checked it
        error = f"{type(exc).__name__}: {message_of(exc)}"
        failed = {"status": "error", "error": f"the result could not be sent: {error}", "line": None}
        return encode({**failed, "type": "result", "execution": execution, "error_type": type(exc).__name__})


def main() -> None:
    arguments = parse_arguments(sys.argv[1:])
    if "uid" in arguments:
        drop_privileges(int(arguments["uid"]), int(arguments["gid"]))
    private = PrivateFds()
    streams = StandardStreams(private)
    kept_builtins = KeptBuiltins()
    channel = Channel(private.move(int(arguments["cmd_fd"])), private.move(int(arguments["reply_fd"])))
    session = Session(channel, arguments)
    channel.send({"type": "ready", "pid": os.getpid(), "uid": os.getuid()})
    while True:
        request = next_command(channel)
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
        streams.restore()
        restored = kept_builtins.restore()
        if restored:
            outcome["builtins_restored"] = restored
        channel.send_encoded(encode_result(outcome, request["execution"]))


if __name__ == "__main__":
    main()
