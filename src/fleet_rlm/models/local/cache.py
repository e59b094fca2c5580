"""Where the real model and its runtime are kept, the lock that lets one process at a time fill that place,
and running the slow steps with their progress on stderr."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import platformdirs

from fleet_rlm.config import APP_NAME

CACHE_ENV = "FLEET_REAL_MODEL_CACHE"
HEARTBEAT_SECONDS = 30.0


class RealModelError(RuntimeError):
    """The real model or its runtime cannot be prepared or started; the message says what and why."""


def cache_root() -> Path:
    """``$FLEET_REAL_MODEL_CACHE``, else ``real-model`` in Fleet's user cache directory."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return Path(platformdirs.user_cache_dir(APP_NAME)) / "real-model"


def progress(message: str) -> None:
    print(f"real model: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def cache_lock(root: Path, what: str) -> Iterator[None]:
    """Hold the cache's file lock: one process at a time downloads or builds into ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / ".lock"
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another process that is preparing {what} (lock {path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def find_uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")
    if not uv:
        raise RealModelError("uv is needed to prepare the real model and was not found: install it (pip install uv)")
    return uv


def run_logged(command: list[str], what: str, *, env: dict[str, str] | None = None) -> None:
    """Run ``command``, copying its output to stderr, with a heartbeat while it is quiet.

    Raises RealModelError with the end of the output when it fails.
    """
    started = time.monotonic()
    tail: deque[str] = deque(maxlen=40)
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, env=env
    ) as process:

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                tail.append(line.rstrip())
                progress(f"  {line.rstrip()}")

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            while True:
                try:
                    process.wait(timeout=HEARTBEAT_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    progress(f"{what}: still working ({time.monotonic() - started:.0f}s)")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            reader.join(timeout=5)
    if process.returncode != 0:
        output = "\n".join(tail)
        raise RealModelError(f"{what} failed (exit status {process.returncode}):\n{output}")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
