"""The real model served over an OpenAI-compatible API on a free local port, for as long as a test needs it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from fleet_rlm.config import Settings
from fleet_rlm.models.local.cache import RealModelError, cache_root, progress
from fleet_rlm.models.local.runtime import ensure_runtime
from fleet_rlm.models.local.specs import ModelSpec
from fleet_rlm.models.local.speed import Speed, parse_speed
from fleet_rlm.models.local.weights import ensure_model

DEFAULT_CONTEXT = 8192
START_TIMEOUT = 120.0
STOP_TIMEOUT = 10.0
API_KEY = "local"
# About 400 prompt tokens no earlier prompt shares (llama.cpp reads only what its cache lacks), and a
# task that cannot end before the written tokens run out.
_PACE_PROMPT = "Count from 1 to 1000, the numbers separated by commas, nothing else.\n" + " ".join(
    f"item{i}" for i in range(130)
)
PACE_WRITTEN_TOKENS = 64
_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: the kernel sends it SIGTERM when the process that started it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class RealModelServer:
    """llama-cpp-python's server with one local model, prepared first (with progress) if the cache lacks it.

    Use as a context manager: the server is stopped on exit, whatever happened inside. The child also
    dies with the process that started it, so a killed test run leaves no server behind.
    """

    def __init__(
        self,
        spec: ModelSpec,
        *,
        context: int = DEFAULT_CONTEXT,
        threads: int | None = None,
        root: Path | None = None,
    ) -> None:
        self.spec = spec
        self.context = context
        self.threads = threads or os.cpu_count() or 1
        self.root = root or cache_root()
        self.port = 0
        self.start_seconds = 0.0
        self._process: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model(self) -> str:
        """The model name as Fleet's settings take it."""
        return f"openai/{self.spec.alias}"

    def start(self) -> RealModelServer:
        python = ensure_runtime(self.root)
        model = ensure_model(self.spec, self.root)
        started = time.monotonic()
        for _attempt in range(3):
            self.port = free_port()
            self._spawn(python, model)
            try:
                ready = self._wait_ready()
            except BaseException:
                self.stop()
                raise
            if ready:
                self.start_seconds = time.monotonic() - started
                progress(f"{self.spec.alias} answers at {self.base_url} (started in {self.start_seconds:.1f}s)")
                return self
            tail = self.log_tail()
            self.stop()
            if "address already in use" not in tail.lower():  # else another process took the port: retry
                break
        raise RealModelError(f"the {self.spec.size} model's server did not start:\n{tail}")

    def _spawn(self, python: Path, model: Path) -> None:
        handle, name = tempfile.mkstemp(prefix=f"fleet-real-model-{self.spec.alias}-", suffix=".log")
        self._log = Path(name)
        args = {
            "model": str(model),
            "model_alias": self.spec.alias,
            "host": "127.0.0.1",
            "port": str(self.port),
            "n_ctx": str(self.context),
            "n_threads": str(self.threads),
            "n_threads_batch": str(self.threads),
            # By default a waiting request cuts a streaming one short; Fleet's calls must all finish.
            "interrupt_requests": "false",
            # Logits of every prompt token are of no use to a chat server and cost prompt time.
            "logits_all": "false",
        }
        command = [str(python), "-m", "llama_cpp.server"]
        for key, value in args.items():
            command += [f"--{key}", value]
        # OpenMP threads that spin while they wait make generation several times slower on a busy
        # machine (measured here: 3.9 against 15.9 tokens/s with the other core taken).
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        with os.fdopen(handle, "wb") as log:
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, preexec_fn=_die_with_parent
            )

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        assert self._process is not None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/models", timeout=2.0).status_code == 200:
                    return True
            time.sleep(0.2)
        return False

    @property
    def log_path(self) -> Path | None:
        """The server's log while it runs (removed when it stops)."""
        return self._log

    def log_size(self) -> int:
        """Where the server's log ends now: pass it to ``speed`` to count only what follows."""
        try:
            return self._log.stat().st_size if self._log is not None else 0
        except OSError:
            return 0

    def speed(self, since: int = 0) -> Speed:
        """How fast the model read and wrote in the completions logged after byte ``since``."""
        if self._log is None:
            return Speed()
        with self._log.open("rb") as log:
            log.seek(since)
            return parse_speed(log.read().decode(errors="replace"))

    def measure_pace(self) -> Speed:
        """How fast this machine runs the model now: one completion that reads about 400 tokens and writes 64
        (the server's ``min_tokens`` keeps the end of its answer away until then).

        The deadlines of tests with a real model scale with it: a slow or busy machine reads and writes
        several times slower than a quiet one.
        """
        mark = self.log_size()
        body = {
            "model": self.spec.alias,
            "messages": [{"role": "user", "content": f"{time.time_ns()} {_PACE_PROMPT}"}],
            "max_tokens": PACE_WRITTEN_TOKENS,
            "min_tokens": PACE_WRITTEN_TOKENS,  # the model may not end its answer early (it did: 40 tokens)
            "temperature": 0,
        }
        response = httpx.post(f"{self.base_url}/chat/completions", json=body, timeout=300)
        response.raise_for_status()
        return self.speed(mark)

    def log_tail(self, lines: int = 30) -> str:
        if self._log is None:
            return ""
        try:
            return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.unlink(missing_ok=True)
            self._log = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def __enter__(self) -> RealModelServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def fleet_values(self, max_tokens: int = 1024) -> dict[str, Any]:
        """Settings that make this server Fleet's root model and sub-model."""
        return {
            "lm_model": self.model,
            "lm_base_url": self.base_url,
            "lm_api_key": API_KEY,
            "sub_lm_model": self.model,
            "lm_num_retries": 0,
            "lm_temperature": 0.0,
            "lm_max_tokens": max_tokens,
        }

    def fleet_env(self, max_tokens: int = 1024) -> dict[str, str]:
        """The same as ``FLEET_*`` environment variables, for ``fleet`` run as a command."""
        return {f"FLEET_{key.upper()}": str(value) for key, value in self.fleet_values(max_tokens).items()}

    def settings(self, home: Path, **overrides: Any) -> Settings:
        """Settings for an in-process turn against this server; no file or environment is read."""
        values = {"home": home, **self.fleet_values(), **overrides}
        return Settings.model_validate(values)
