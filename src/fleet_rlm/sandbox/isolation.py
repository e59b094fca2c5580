"""How a worker process is launched: inside bubblewrap (isolated) or as a plain subprocess.

Isolation when the host is root: bwrap runs privileged without a user namespace, keeps only
CAP_SETUID/CAP_SETGID, and the worker drops to a per-sandbox uid first thing, so the process
limit (RLIMIT_NPROC, not enforced for uid 0) applies to the sandbox alone. When the host is not
root, bwrap runs unprivileged as the user (with its own user namespace) and the process limit is
raised by the user's current task count. Either way the sandbox sees a fresh tmpfs root holding
only read-only system directories and the Python installation (the sandbox environment and the
interpreter it was made from, the host's own package directories hidden under empty read-only
tmpfs), the workspace at ``/workspace`` (writable, the working directory), a private ``/tmp`` and an
empty environment.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import pkgutil
import random
import resource
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from fleet_rlm.sandbox.base import SandboxLimits
from fleet_rlm.sandbox.gate import Rlimit, set_rlimits, start_gated
from fleet_rlm.sandbox.guard import SandboxGuard
from fleet_rlm.sandbox.protections import MachineProtections
from fleet_rlm.sandbox.spawner import on_lasting_thread

WORKSPACE_MOUNT = "/workspace"
WORKER_MOUNT = "/opt/fleet/worker.py"
WORKER_SOURCE = Path(__file__).with_name("worker.py")
# System directories the interpreter and ordinary tools need, bound read-only when they exist.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/fonts",  # fontconfig, which matplotlib asks for the system fonts
)
NAMESPACES = ("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try")
SANDBOX_UID_BASE = 200_000
SANDBOX_UID_SPAN = 1_000_000
BWRAP_TASKS = 2  # bubblewrap's own two processes, which share the sandbox's cgroups
PIPE_SIZE = 1 << 20


@dataclass(frozen=True)
class PythonRuntime:
    """The interpreter a worker runs on, the directories it needs (its prefixes), its import path, and
    package directories inside those that the sandbox must not see (the host's installed packages)."""

    executable: str
    prefixes: tuple[str, ...]
    path: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()

    @classmethod
    def current(cls) -> PythonRuntime:
        prefixes = (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
        return cls.of(sys.executable, prefixes, tuple(sys.path))

    @classmethod
    def probe(cls, executable: str) -> PythonRuntime:
        """Ask another interpreter where it lives (one short subprocess)."""
        script = (
            "import sys; print(sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, sep='\\n'); "
            "print('\\0'.join(sys.path))"
        )
        try:
            found = subprocess.run(
                [executable, "-I", "-c", script], capture_output=True, text=True, timeout=30, check=True
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise ValueError(f"python executable {executable!r} cannot be used for sandboxes: {exc}") from exc
        lines = found.stdout.split("\n")
        return cls.of(executable, tuple(lines[:4]), tuple(lines[4].split("\0")) if len(lines) > 4 else ())

    @classmethod
    def of(cls, executable: str, prefixes: tuple[str, ...], path: tuple[str, ...] = ()) -> PythonRuntime:
        real_bin_dir = os.path.dirname(os.path.realpath(executable))
        dirs = {os.path.abspath(p) for p in (*prefixes, os.path.dirname(real_bin_dir)) if p}
        return cls(os.path.abspath(executable), tuple(sorted(dirs)), path)

    def site_directories(self) -> list[str]:
        """The import path's package directories that the sandbox sees (those inside the prefixes)."""
        return [
            entry
            for entry in self.path
            if os.path.basename(entry) in ("site-packages", "dist-packages")
            and any(entry == prefix or entry.startswith(prefix + os.sep) for prefix in self.prefixes)
        ]


MAX_LISTED_PACKAGES = 60


@functools.cache
def importable_packages(runtime: PythonRuntime) -> str:
    """A sentence for the model: what it can import in the sandbox besides the standard library.

    Read from the runtime's package directories by name only: nothing is imported.
    """
    stdlib = set(sys.stdlib_module_names)
    names = sorted(
        {
            module.name
            for module in pkgutil.iter_modules(runtime.site_directories())
            if module.name.isidentifier() and not module.name.startswith("_") and "__" not in module.name
        }
        - stdlib,
        key=str.lower,
    )
    shown = names[:MAX_LISTED_PACKAGES]
    more = f" and {len(names) - len(shown)} more" if len(names) > len(shown) else ""
    listed = ", ".join(shown) if shown else "none"
    charts = (
        " matplotlib draws off-screen (the Agg backend): save a chart as a PNG file under artifacts/ with "
        "plt.savefig, it cannot be shown."
        if "matplotlib" in names
        else ""
    )
    return (
        "You can import the Python standard library and these installed packages: "
        f"{listed}{more}. Nothing else can be installed (there is no network); a package missing from this "
        f"list is not available, so use the standard library instead (csv, json, statistics, sqlite3, ...).{charts}"
    )


@dataclass
class LaunchedWorker:
    """A started worker: its process, the host ends of its pipes, and its sandbox uid if any."""

    process: subprocess.Popen[bytes]
    command_fd: int
    reply_fd: int
    stdout_fd: int
    stderr_fd: int
    uid: int | None = None
    release: Callable[[], None] = field(default_factory=lambda: _nothing)
    guard: SandboxGuard | None = None  # the whole-sandbox limits; released (torn down) by ``release``

    def kill_everything(self) -> None:
        """SIGKILL every process of the sandbox, wherever it went (its cgroups hold them all)."""
        if self.guard is not None:
            self.guard.kill_all()

    def limit_notice(self) -> str | None:
        """What a whole-sandbox limit did since the last call (e.g. a process killed for memory)."""
        return self.guard.notice() if self.guard is not None else None

    def limit_reason(self) -> str | None:
        """Why the sandbox died, when a whole-sandbox limit explains it."""
        return self.guard.death_reason() if self.guard is not None else None

    def limit_hit(self) -> str | None:
        """The whole-sandbox limit that killed it, in a few words, when one did."""
        return self.guard.limit_hit() if self.guard is not None else None


def _nothing() -> None:
    return None


def _then(first: Callable[[], None], second: Callable[[], None]) -> Callable[[], None]:
    def both() -> None:
        try:
            first()
        finally:
            second()

    return both


class Launcher:
    """Starts workers for one way of running them; ``isolated`` says whether it is a real sandbox."""

    isolated = False

    def __init__(self, runtime: PythonRuntime, protections: MachineProtections | None = None) -> None:
        self.runtime = runtime
        self.protections = protections

    def _guard(self, limits: SandboxLimits, overhead_tasks: int) -> SandboxGuard | None:
        """The prepared whole-sandbox limits for one launch (None when none apply)."""
        if self.protections is None:
            return None
        guard = self.protections.guard(limits, overhead_tasks)
        guard.prepare()
        return guard

    def _launch_guarded(
        self,
        guard: SandboxGuard | None,
        argv: list[str],
        worker_args: list[str],
        env: dict[str, str],
        cwd: str,
        limits: list[Rlimit],
    ) -> LaunchedWorker:
        """Spawn with the guard's cgroups entered and ``limits`` set before the command runs; the guard
        is torn down if that fails."""
        if guard is None:
            return self._spawn(argv, worker_args, env, cwd, lambda pid: set_rlimits(pid, limits))

        sandbox = guard

        def place(pid: int) -> None:
            sandbox.place(pid)
            set_rlimits(pid, limits)

        try:
            launched = self._spawn(argv, worker_args, env, cwd, place, guard.pass_fds)
        except BaseException:
            guard.teardown()
            raise
        guard.launched()
        launched.guard = guard
        launched.release = guard.teardown
        return launched

    def launch(self, workspace: Path, limits: SandboxLimits) -> LaunchedWorker:
        raise NotImplementedError

    def environment(self, home: str) -> dict[str, str]:
        python_bin = os.path.dirname(self.runtime.executable)
        return {
            "PATH": f"{python_bin}:/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "MPLBACKEND": "Agg",  # no display: matplotlib renders to files
        }

    def _spawn(
        self,
        argv: list[str],
        worker_args: list[str],
        env: dict[str, str],
        cwd: str,
        place: Callable[[int], None],
        pass_fds: tuple[int, ...] = (),
    ) -> LaunchedWorker:
        command_r, command_w = os.pipe()
        reply_r, reply_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        set_pipe_size: int = getattr(fcntl, "F_SETPIPE_SZ", -1)  # Linux only
        for fd in (command_w, reply_w, stdout_w) if set_pipe_size >= 0 else ():
            with contextlib.suppress(OSError):  # larger pipes mean fewer wake-ups for big inputs
                fcntl.fcntl(fd, set_pipe_size, PIPE_SIZE)
        try:
            # From the spawner thread: --die-with-parent follows the thread that started the sandbox.
            process = start_gated(
                [*argv, f"cmd_fd={command_r}", f"reply_fd={reply_w}", *worker_args],
                place,
                on_lasting_thread,
                stdout=stdout_w,
                stderr=stderr_w,
                pass_fds=(command_r, reply_w, *pass_fds),
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        except BaseException:
            for fd in (command_r, command_w, reply_r, reply_w, stdout_r, stdout_w, stderr_r, stderr_w):
                os.close(fd)
            raise
        for fd in (command_r, reply_w, stdout_w, stderr_w):
            os.close(fd)
        return LaunchedWorker(process, command_w, reply_r, stdout_r, stderr_r)


class UnisolatedLauncher(Launcher):
    """The worker as a plain subprocess of the host with an empty environment: NO isolation."""

    isolated = False

    def launch(self, workspace: Path, limits: SandboxLimits) -> LaunchedWorker:
        nproc = limits.max_processes + (user_task_count() if os.getuid() != 0 else 0)
        argv = [self.runtime.executable, "-I", str(WORKER_SOURCE)]
        worker_args = [*limit_arguments(limits), f"workdir={workspace}"]
        guard = self._guard(limits, 0)
        env = self.environment(str(workspace))
        return self._launch_guarded(guard, argv, worker_args, env, str(workspace), rlimits(limits, nproc))


class BubblewrapLauncher(Launcher):
    """The worker inside bubblewrap namespaces with only the workspace writable."""

    isolated = True

    def __init__(self, runtime: PythonRuntime, bwrap: str, protections: MachineProtections | None = None) -> None:
        super().__init__(runtime, protections)
        self.bwrap = bwrap
        self.privileged = os.getuid() == 0

    def launch(self, workspace: Path, limits: SandboxLimits) -> LaunchedWorker:
        worker_args = [*limit_arguments(limits), f"workdir={WORKSPACE_MOUNT}"]
        uid: int | None = None
        if self.privileged:
            uid = _uids.allocate()
            worker_args += [f"uid={uid}", f"gid={uid}"]
            nproc = limits.max_processes
        else:
            nproc = limits.max_processes + user_task_count()
        guard: SandboxGuard | None = None
        try:
            guard = self._guard(limits, BWRAP_TASKS)
            argv = [*self.bwrap_arguments(workspace, guard), self.runtime.executable, "-I", WORKER_MOUNT]
            launched = self._launch_guarded(guard, argv, worker_args, {}, "/", rlimits(limits, nproc))
        except BaseException:
            if guard is not None:
                guard.teardown()
            if uid is not None:
                _uids.release(uid)
            raise
        if uid is not None:
            launched.uid = uid
            launched.release = _then(launched.release, lambda: _uids.release(uid))
        return launched

    def bwrap_arguments(self, workspace: Path, guard: SandboxGuard | None = None) -> list[str]:
        mounts = MountPlan()
        for path in SYSTEM_PATHS:
            mounts.system(path)
        for path in SYSTEM_FILES:
            if os.path.exists(path):
                mounts.read_only(path, path)
        mounts.special(["--proc", "/proc"], "/proc")
        mounts.special(["--dev", "/dev"], "/dev")
        mounts.special(guard.bwrap_tmp_arguments() if guard else ["--perms", "01777", "--tmpfs", "/tmp"], "/tmp")
        for prefix in self.runtime.prefixes:
            mounts.read_only(prefix, prefix)
        for directory in self.runtime.hidden:
            mounts.hide(directory)
        mounts.read_only(str(WORKER_SOURCE), WORKER_MOUNT)
        mounts.special(["--bind", str(workspace), WORKSPACE_MOUNT], WORKSPACE_MOUNT)
        args = [self.bwrap, *NAMESPACES, "--die-with-parent", "--new-session", "--clearenv"]
        for name, value in self.environment("/tmp").items():
            args += ["--setenv", name, value]
        # The worker enters the workspace itself at its first execution: the host gives the sandbox uid
        # the workspace while the worker boots, so it may not be enterable yet.
        args += [*mounts.arguments(), "--chdir", "/tmp", *(guard.bwrap_seccomp_arguments() if guard else [])]
        if self.privileged:
            args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        return args


class MountPlan:
    """bwrap mount arguments on a fresh tmpfs root. Parent directories are made explicitly with
    mode 0755 (bwrap would make them 0700, which the sandbox uid could not traverse)."""

    def __init__(self) -> None:
        self._args: list[str] = ["--tmpfs", "/"]
        self._made: set[str] = {"/"}
        self._bound: list[str] = []

    def system(self, path: str) -> None:
        if os.path.islink(path):  # merged /usr: /bin -> usr/bin
            self._args += ["--symlink", os.readlink(path), path]
            self._made.add(path)
        elif os.path.isdir(path):
            self.read_only(path, path)

    def special(self, arguments: list[str], destination: str) -> None:
        """A mount bwrap makes itself (proc, dev, tmpfs, the writable workspace)."""
        self._parents(destination)
        self._args += arguments
        self._made.add(destination)

    def read_only(self, source: str, destination: str) -> None:
        if any(destination == bound or destination.startswith(bound + "/") for bound in self._bound):
            return
        self._parents(destination)
        self._args += ["--ro-bind", source, destination]
        self._bound.append(destination)

    def hide(self, path: str) -> None:
        """An empty read-only tmpfs over ``path``, a directory inside something bound read-only."""
        if any(path.startswith(bound + "/") for bound in self._bound):
            self._args += ["--tmpfs", path, "--remount-ro", path]

    def _parents(self, destination: str) -> None:
        parts = Path(destination).parent.parts[1:]
        for depth in range(1, len(parts) + 1):
            directory = "/" + "/".join(parts[:depth])
            if directory not in self._made:
                self._args += ["--perms", "0755", "--dir", directory]
                self._made.add(directory)

    def arguments(self) -> list[str]:
        return list(self._args)


def limit_arguments(limits: SandboxLimits) -> list[str]:
    """Limits the worker quotes in error hints."""
    return [
        f"memory_mb={limits.memory_mb}",
        f"max_processes={limits.max_processes}",
        f"max_file_size_mb={limits.max_file_size_mb}",
    ]


def rlimits(limits: SandboxLimits, nproc: int) -> list[Rlimit]:
    """The sandbox's resource limits, set on its first process before it runs."""
    memory = limits.memory_mb * 1024 * 1024
    file_size = limits.max_file_size_mb * 1024 * 1024
    cpu = limits.cpu_seconds
    return [
        (resource.RLIMIT_AS, (memory, memory)),
        (resource.RLIMIT_NPROC, (nproc, nproc)),
        (resource.RLIMIT_FSIZE, (file_size, file_size)),
        (resource.RLIMIT_CPU, (cpu, cpu + 5)),
        (resource.RLIMIT_CORE, (0, 0)),
        # No real-time scheduling and no nice below the start's, whatever the host was allowed: a
        # real-time process ignores the sandbox's CPU weight.
        (resource.RLIMIT_RTPRIO, (0, 0)),
        (resource.RLIMIT_NICE, (0, 0)),
    ]


def _processes(*attrs: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each process's pid and ``attrs`` (None where access is denied), read in one go.

    ``as_dict`` rather than ``process_iter(attrs)``: that stores them on Process objects shared by
    every thread, and sandboxes start on several at once.
    """
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.NoSuchProcess):
            yield process.pid, process.as_dict(list(attrs))


def user_task_count() -> int:
    """Tasks (processes and threads) of the current (real) user: what RLIMIT_NPROC counts."""
    uid = os.getuid()
    return sum(
        info["num_threads"] or 0
        for _, info in _processes("uids", "num_threads")
        if info["uids"] is not None and info["uids"].real == uid
    )


def walk_processes_of(uid: int) -> Iterator[int]:
    """Pids of processes running as ``uid``, zombies too (to verify a sandbox left nothing behind)."""
    for pid, info in _processes("uids"):
        if info["uids"] is not None and info["uids"].effective == uid:
            yield pid


class _UidPool:
    """Random sandbox uids from a high range, never two live sandboxes of this process on one."""

    def __init__(self) -> None:
        self._live: set[int] = set()
        self._lock = threading.Lock()
        self._random = random.SystemRandom()

    def allocate(self) -> int:
        with self._lock:
            while True:
                uid = SANDBOX_UID_BASE + self._random.randrange(SANDBOX_UID_SPAN)
                if uid not in self._live:
                    self._live.add(uid)
                    return uid

    def release(self, uid: int) -> None:
        with self._lock:
            self._live.discard(uid)


_uids = _UidPool()
