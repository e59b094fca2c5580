"""The peer RLMs of ``real_tasks.py``: the reference implementation (``rlms``) and ``minrlm``.

Each runs in-process on the same model server, with the same task text, in a directory holding the task's
``files/`` (its working directory), bounded like the baseline: a thread that is abandoned at the turn
timeout. Their model calls go through a :class:`ModelGate`, which counts the calls and the tokens the
server reported, and refuses any call past the run's deadline or its model-call budget, so an abandoned
run stops at its next call. Install them with ``uv sync --group bench``.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

NO_CODE = "ERROR: LLM response did not contain executable Python code"
"""How minrlm ends a run whose reply held no code: its parse failure."""
NO_FINAL = "ERROR: Max iterations"
"""How minrlm's answer starts when its iteration budget ran out and nothing was printed to return."""


@dataclass(frozen=True)
class PeerConfig:
    """What a peer is given: the model server, the model's name as the server serves it, and the budgets."""

    upstream: str
    """The model server's OpenAI-compatible root, ending in ``/v1``."""
    model: str
    api_key: str
    temperature: float
    max_tokens: int
    max_iterations: int
    max_model_calls: int
    turn_timeout: float
    wind_down: float
    """How long to wait for an abandoned run to stop after its deadline."""


@dataclass
class PeerRun:
    outcome: str
    answer: str
    error: str | None
    iterations: int
    model_calls: int
    input_tokens: int
    output_tokens: int
    seconds: float
    parse_failures: int = 0
    trace: list[str] = field(default_factory=list)


# -- the gate before the model server -----------------------------------------------------------------


class ModelGate:
    """A loopback proxy before the model server that counts calls and tokens and enforces the run's budgets.

    A refused call is answered ``400`` (the OpenAI clients do not retry it), so a peer sees a failed
    model call, as it would from a provider that refused it.
    """

    def __init__(self, upstream: str, max_calls: int, deadline: float) -> None:
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.max_calls = max_calls
        self.deadline = deadline
        self.calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _GateHandler)
        self._server.daemon_threads = True
        self._server.gate = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, name="model-gate", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def admit(self) -> str | None:
        """Count one call, or say why it is refused."""
        with self.lock:
            if time.monotonic() > self.deadline:
                return "the benchmark's turn deadline has passed"
            if self.calls >= self.max_calls:
                return f"the benchmark's budget of {self.max_calls} model calls is spent"
            self.calls += 1
            return None

    def record(self, body: bytes) -> None:
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            usage = json.loads(body).get("usage") or {}
            with self.lock:
                self.input_tokens += int(usage.get("prompt_tokens") or 0)
                self.output_tokens += int(usage.get("completion_tokens") or 0)

    def __enter__(self) -> ModelGate:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _GateHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    @property
    def gate(self) -> ModelGate:
        return self.server.gate  # type: ignore[attr-defined,no-any-return]

    def do_GET(self) -> None:
        self._forward("GET", b"")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        refusal = self.gate.admit()
        if refusal is not None:
            self._reply(400, json.dumps({"error": {"message": refusal, "type": "benchmark_budget"}}).encode())
            return
        self._forward("POST", body)

    def _forward(self, method: str, body: bytes) -> None:
        remaining = max(1.0, self.gate.deadline - time.monotonic())
        headers = {
            key: value for key, value in self.headers.items() if key.lower() in ("content-type", "authorization")
        }
        try:
            response = httpx.request(
                method, self.gate.upstream + self.path, content=body, headers=headers, timeout=remaining
            )
        except httpx.HTTPError as exc:
            message = f"the model server did not answer before the deadline: {type(exc).__name__}"
            self._reply(400, json.dumps({"error": {"message": message, "type": "benchmark_budget"}}).encode())
            return
        if method == "POST":
            self.gate.record(response.content)
        self._reply(response.status_code, response.content, response.headers.get("content-type"))

    def _reply(self, status: int, body: bytes, content_type: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type or "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            self.wfile.write(body)


# -- running a peer in a thread with a deadline -------------------------------------------------------


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    """The peers' interpreters run in the current directory, where ``files/`` must be."""
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def run_bounded(work: Callable[[], Any], root: Path, timeout: float, wind_down: float) -> tuple[Any, str | None, float]:
    """``work()`` in ``root`` on a thread: its result, or the one-line error that ended it, and the time taken."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = work()
        except Exception as exc:  # every failure is one line of the report
            box["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]

    started = time.monotonic()
    with working_directory(root):
        worker = threading.Thread(target=target, daemon=True)
        worker.start()
        worker.join(timeout)
        seconds = time.monotonic() - started
        if worker.is_alive():
            box["error"] = f"deadline of {timeout:g}s exceeded"
            worker.join(wind_down)  # its next model call is refused at the gate; let it wind down
    return box.get("result"), box.get("error"), seconds


# -- the reference implementation (rlms) --------------------------------------------------------------


def reference_setup_code(root: Path) -> str:
    """The reference's local REPL runs each cell in a temporary directory of its own: link ``files/`` and
    ``artifacts/`` of the run's directory into it, so relative paths mean the same as for the others."""
    (root / "artifacts").mkdir(exist_ok=True)
    return (
        "import os\n"
        f"os.symlink({str(root / 'files')!r}, 'files')\n"
        f"os.symlink({str(root / 'artifacts')!r}, 'artifacts')\n"
    )


def run_reference(config: PeerConfig, text: str, root: Path) -> PeerRun:
    from rlm import RLM
    from rlm.logger import RLMLogger

    started = time.monotonic()
    logger = RLMLogger()
    with ModelGate(config.upstream, config.max_model_calls, started + config.turn_timeout) as gate:
        rlm = RLM(
            backend="openai",
            backend_kwargs={
                "model_name": config.model,
                "base_url": gate.base_url,
                "api_key": config.api_key,
                "max_retries": 0,
            },
            environment="local",
            environment_kwargs={"setup_code": reference_setup_code(root)},
            max_iterations=config.max_iterations,
            max_timeout=config.turn_timeout,
            logger=logger,
            # Its OpenAI client sends ``max_tokens`` as ``max_completion_tokens``, which llama.cpp's server
            # does not read; in the body itself it bounds the reply as it does for the other routes.
            sampling_args={"temperature": config.temperature, "extra_body": {"max_tokens": config.max_tokens}},
        )
        result, error, seconds = run_bounded(
            lambda: rlm.completion(text, root_prompt=text), root, config.turn_timeout, config.wind_down
        )
    steps = list(logger.get_trajectory()["iterations"]) if logger.get_trajectory() else []
    if result is not None and error is None:
        # Past its last iteration the reference asks the model once more for an answer (_default_answer),
        # and logs that as one more iteration without code.
        outcome = "extracted" if len(steps) > config.max_iterations else "submitted"
        answer = str(result.response)
    else:
        outcome, answer = "failed", ""
    trace = []
    for step in steps:
        blocks = step.get("code_blocks") or []
        if not blocks:  # a reply without a ```repl``` block: the reference sends it back and goes on
            trace.append(f"reply: {str(step.get('response'))[:400]}")
        for block in blocks:
            result = block.get("result") or {}
            trace += [f"code: {str(block.get('code'))[:400]}", f"output: {str(result.get('stdout'))[:400]}"]
            if result.get("stderr"):
                trace.append(f"error: {str(result.get('stderr'))[:300]}")
    return PeerRun(
        outcome, answer, error, len(steps), gate.calls, gate.input_tokens, gate.output_tokens, seconds, trace=trace
    )


# -- minrlm -------------------------------------------------------------------------------------------


def run_minrlm(config: PeerConfig, text: str, root: Path) -> PeerRun:
    from minrlm import RLM
    from openai import AsyncOpenAI, OpenAI

    started = time.monotonic()
    steps: list[tuple[str, dict[str, Any]]] = []
    with ModelGate(config.upstream, config.max_model_calls, started + config.turn_timeout) as gate:
        client_args = {"api_key": config.api_key, "base_url": gate.base_url, "max_retries": 0}
        rlm = RLM(
            model=config.model,
            client=OpenAI(**client_args),
            async_client=AsyncOpenAI(**client_args),
            max_iterations=config.max_iterations,
            max_time_seconds=int(config.turn_timeout),
            max_output_tokens=config.max_tokens,
            temperature=config.temperature,
            max_sub_llm_calls=config.max_model_calls,
            on_step=lambda kind, data: steps.append((kind, data)),
        )
        # No context: the task names its files, as it does for the other routes.
        result, error, seconds = run_bounded(lambda: rlm.completion(text), root, config.turn_timeout, config.wind_down)
    finals = [data.get("output") for kind, data in steps if kind == "executed" and data.get("output") is not None]
    timed_out = any(kind == "timeout" for kind, _ in steps)
    parse_failures = 0
    answer = str(result.response) if result is not None and error is None else ""
    if not answer:
        outcome = "failed"
    elif finals and answer == str(finals[-1]):
        outcome = "submitted"  # FINAL() was called
    elif answer.startswith(NO_CODE):
        outcome, error, answer, parse_failures = "failed", answer, "", 1
    elif timed_out:
        outcome, error, answer = "failed", f"minrlm's own deadline of {int(config.turn_timeout)}s passed", ""
    elif answer.startswith(NO_FINAL):
        outcome, error, answer = "failed", answer, ""
    else:
        outcome = "extracted"  # the budget ran out: minrlm returns the last thing the code printed
    trace = []
    for kind, data in steps:
        if kind == "llm_response" and not data.get("has_code"):
            trace.append(f"reply: {str(data.get('response'))[:400]}")
        elif kind == "executing":
            trace.append(f"code: {str(data.get('code'))[:400]}")
        elif kind == "executed":
            trace.append(f"output: {str(data.get('stdout'))[:400]}")
            if data.get("error"):
                trace.append(f"error: {str(data.get('error'))[:300]}")
    iterations = sum(1 for kind, _ in steps if kind == "thinking")
    return PeerRun(
        outcome,
        answer,
        error,
        iterations,
        gate.calls,
        gate.input_tokens,
        gate.output_tokens,
        seconds,
        parse_failures=parse_failures,
        trace=trace,
    )


PEERS: dict[str, Callable[[PeerConfig, str, Path], PeerRun]] = {"reference": run_reference, "minrlm": run_minrlm}
