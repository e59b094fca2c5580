"""Building a sandbox environment with uv, once per key, atomically, one process at a time.

The host builds it, never a sandbox: a virtual environment of the interpreter Fleet runs on, the lock
installed with ``--require-hashes`` and wheels only (no package's build code runs), the extra packages
(wheels only too) constrained by the lock, bytecode compiled (sandboxes cannot write it). It is built in
a temporary directory beside its final place and renamed there when complete, so a directory under its
key name is always whole; a process that finds another one building waits on the lock file. uv is run
with ``--no-config`` in a directory of its own, so no project file or sandbox-written tree steers it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from fleet_rlm.sandbox.environment.manifest import PYTHON, ManifestError, SandboxEnvironment, write_manifest
from fleet_rlm.sandbox.environment.spec import EnvironmentSpec
from fleet_rlm.sandbox.progress import BuildProgress, Progress, quiet

# Variables that would point uv at another environment or change what it installs; of uv's own, only
# those saying where packages come from and how they are fetched and cached are passed on.
STEERING = ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONHOME")
UV_PASSED_ON = (
    "UV_CACHE_DIR",
    "UV_INDEX",
    "UV_DEFAULT_INDEX",
    "UV_INDEX_URL",
    "UV_EXTRA_INDEX_URL",
    "UV_FIND_LINKS",
    "UV_KEYRING_PROVIDER",
    "UV_LINK_MODE",
    "UV_OFFLINE",
    "UV_NATIVE_TLS",
    "UV_HTTP_TIMEOUT",
    "UV_CONCURRENT_DOWNLOADS",
    "UV_CONCURRENT_INSTALLS",
)
BUILD_PREFIX = ".build-"


class EnvironmentBuildError(RuntimeError):
    """The environment could not be built; the message says why, with the end of uv's output."""


_local_locks: dict[Path, threading.Lock] = {}
_local_locks_guard = threading.Lock()


def built_environment(spec: EnvironmentSpec) -> SandboxEnvironment | None:
    """The environment ``spec`` describes if it is built, else None."""
    return SandboxEnvironment.load(spec.directory, spec.key())


def ensure_environment(spec: EnvironmentSpec, progress: Progress = quiet) -> SandboxEnvironment:
    """The environment ``spec`` describes, built first if it is not there yet."""
    ready = built_environment(spec)
    if ready is not None:
        return ready
    with _build_lock(spec.root, spec.name, progress):
        ready = built_environment(spec)
        if ready is not None:
            return ready
        return _build(spec, spec.key(), progress)


@contextlib.contextmanager
def _build_lock(root: Path, name: str, progress: Progress) -> Iterator[None]:
    """One builder per environment: threads of this process, then processes (a lock file in ``root``)."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}.lock"
    with _local_locks_guard:
        local = _local_locks.setdefault(path, threading.Lock())
    with local, path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(BuildProgress(f"waiting for another process that is building {name}", 0, 1))
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(spec: EnvironmentSpec, key: str, progress: Progress) -> SandboxEnvironment:
    uv = find_uv()
    started = time.monotonic()
    for left in spec.root.glob(f"{BUILD_PREFIX}{spec.name}-*"):  # by a builder that died (we hold its lock)
        shutil.rmtree(left, ignore_errors=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{BUILD_PREFIX}{spec.name}-", dir=spec.root))
    try:
        venv = scratch / "env"
        steps = _Steps(progress, packages=_count_locked(spec.lock) + len(spec.extra_packages))
        env = _uv_environment()
        steps.phase("creating the virtual environment")
        _run(uv, ["venv"], ["--quiet", "--relocatable", "--python", spec.python, str(venv)], scratch, env, steps)
        install = ["--python", str(venv / PYTHON), "--only-binary", ":all:", "--compile-bytecode"]
        steps.phase(f"installing {steps.packages} packages from {spec.lock.name}")
        _run(uv, ["pip", "install"], [*install, "--require-hashes", "-r", str(spec.lock)], scratch, env, steps)
        if spec.extra_packages:
            extras = scratch / "extra-packages.in"
            extras.write_text("".join(f"{package}\n" for package in spec.extra_packages))
            steps.phase(f"installing the extra packages: {' '.join(spec.extra_packages)}")
            _run(uv, ["pip", "install"], [*install, "-r", str(extras), "-c", str(spec.lock)], scratch, env, steps)
        steps.phase("checking the environment")
        _readable_by_all(venv)
        write_manifest(venv, key, spec.extra_packages, time.monotonic() - started, env)
        os.chmod(venv, 0o755)
        if spec.directory.exists():  # unreadable, or half made by hand: replaced whole
            os.rename(spec.directory, scratch / "replaced")
        os.rename(venv, spec.directory)
    except ManifestError as exc:
        raise EnvironmentBuildError(str(exc)) from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    built = SandboxEnvironment.load(spec.directory, key)
    if built is None:
        raise EnvironmentBuildError(f"the environment built at {spec.directory} cannot be read back")
    steps.done(f"built {spec.directory} in {time.monotonic() - started:.1f}s")
    return built


def find_uv() -> str:
    """uv: the one running Fleet (``uv run`` sets ``$UV``), else the first on PATH or beside Python."""
    candidates = [os.environ.get("UV"), shutil.which("uv"), str(Path(sys.executable).with_name("uv"))]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise EnvironmentBuildError(
        "uv is needed to build the sandbox environment and was not found: install it "
        "(https://docs.astral.sh/uv/, or pip install uv)"
    )


def _uv_environment() -> dict[str, str]:
    return {
        name: value
        for name, value in os.environ.items()
        if name not in STEERING and (not name.startswith("UV_") or name in UV_PASSED_ON)
    }


def _count_locked(lock: Path) -> int:
    names = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", lock.read_text(), flags=re.MULTILINE)
    return len(set(names))


class _Steps:
    """Turns uv's output into progress: a unit per package downloaded, one per phase besides."""

    PHASES = 4  # venv, lock, extras, check

    def __init__(self, progress: Progress, packages: int) -> None:
        self.progress = progress
        self.packages = packages
        self.total = packages + self.PHASES
        self.count = 0
        self.message = ""

    def phase(self, message: str) -> None:
        self.message = message
        self._report(message, 1)

    def line(self, text: str) -> None:
        """A line of uv's output: a finished download advances; a milestone only changes the message."""
        text = text.strip()
        if not text:
            return
        if text.startswith("Downloaded "):
            self._report(f"{self.message}: downloaded {text.removeprefix('Downloaded ')}", 1)
        elif text.startswith(("Downloading ", "Prepared ", "Installed ", "Bytecode compiled ", "Resolved ")):
            self._report(f"{self.message}: {text[0].lower()}{text[1:]}", 0)

    def done(self, message: str) -> None:
        self.count = self.total - 1
        self._report(message, 1)

    def _report(self, message: str, advance: int) -> None:
        self.count = min(self.total, self.count + advance)
        self.progress(BuildProgress(message, self.count, self.total))


def _run(uv: str, command: list[str], options: list[str], cwd: Path, env: dict[str, str], steps: _Steps) -> None:
    """Run ``uv COMMAND --no-config OPTIONS`` in ``cwd``, feeding its output to ``steps``; raise with its end."""
    tail: deque[str] = deque(maxlen=30)
    try:
        with subprocess.Popen(
            [uv, *command, "--no-config", *options],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            umask=0o022,
        ) as process:
            assert process.stdout is not None
            for line in process.stdout:
                tail.append(line.rstrip())
                steps.line(line)
    except OSError as exc:
        raise EnvironmentBuildError(f"uv could not be run ({uv}): {exc}") from exc
    if process.returncode != 0:
        output = "\n".join(tail)
        raise EnvironmentBuildError(f"`uv {' '.join(command)}` failed (exit {process.returncode}):\n{output}")


def _readable_by_all(root: Path) -> None:
    """Every file readable and every directory enterable by anyone: sandboxes run as uids of their own."""
    for directory, subdirectories, files in os.walk(root):
        for name in (*subdirectories, *files):
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                continue
            wanted = mode | (0o555 if stat.S_ISDIR(mode) or mode & 0o111 else 0o444)
            if wanted != mode:
                os.chmod(path, stat.S_IMODE(wanted))
