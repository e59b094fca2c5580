"""A small pool of started sandboxes, so a turn's first execution does not wait for a cold start.

Every sandbox (pooled or cold) gets its own fresh workspace volume under
``<data dir>/sandboxes/<sandbox id>/`` (bounded in bytes and files where the backend can). When a
turn takes one, the session's files are copied in (see :mod:`fleet_rlm.service.files`); when the turn ends, the artifacts and memory it
wrote are copied back into the session's blob store with the turn's commit, and the sandbox and
its directory are torn down, except the session's kernel (the turn's own sandbox, kept with its
directory for the session's next turn: :mod:`fleet_rlm.service.kernels.registry`). A sandbox is never reused
by another session.

Each directory carries ``label.json`` naming the server process (runner) and, once leased, the
session and turn. At start-up, :meth:`SandboxPool.reap` unmounts and removes every directory whose
runner is dead, so no sandbox survives a crash unaccounted.

Starting and tearing down sandboxes (and making their volumes) block a thread for as long as the
sandbox takes, which under load is long. They run on the pool's own few threads
(:attr:`SandboxPool.lifecycle`, a :class:`~fleet_rlm.service.kernels.lanes.ThreadLane`, which kernels'
snapshots and restores share, never all of its threads at once), not on the event loop's default
executor, so a burst of sandbox starts never makes a finished turn's file work wait behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet_rlm.protocol.events import new_id
from fleet_rlm.protocol.payloads import OutputStream
from fleet_rlm.sandbox.base import (
    Sandbox,
    SandboxBackend,
    SandboxFactory,
    SandboxLimits,
    SandboxObserver,
    SandboxSpec,
    WorkspaceFiles,
)
from fleet_rlm.sandbox.volume import Volume, remove_volume_directory
from fleet_rlm.sandbox.wrapper import WrapperSandbox
from fleet_rlm.service.kernels.lanes import ThreadLane, usable_cores
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.tree import SHARED_DIR_MODE

log = logging.getLogger(__name__)
LABEL_FILE = "label.json"
REFILL_DELAY_SECONDS = 0.3
LIFECYCLE_THREADS = usable_cores() + 1
"""Sandboxes started or torn down at once. Each costs the host CPU (its volume made and mounted,
bubblewrap launched, the worker's start awaited) beside the event loop: with 16 at once the load
benchmark's p99 event lag rose ~1.2x, with 3 (on 2 cores) it fell ~0.5x for ~0.93x the throughput."""


class SwitchableObserver:
    """The observer a pooled sandbox is started with; the turn that takes it plugs in its own."""

    def __init__(self) -> None:
        self.target: SandboxObserver | None = None

    def output(self, stream: OutputStream, text: str) -> None:
        if self.target is not None:
            self.target.output(stream, text)

    def tool_started(self, call_id: str, name: str, arguments: str) -> None:
        if self.target is not None:
            self.target.tool_started(call_id, name, arguments)

    def tool_finished(self, call_id: str, name: str, duration: float, error: str | None) -> None:
        if self.target is not None:
            self.target.tool_finished(call_id, name, duration, error)

    def warning(self, message: str) -> None:
        if self.target is not None:
            self.target.warning(message)


@dataclass
class Started:
    """A started sandbox, the observer it reports to (retargeted per turn) and its labels."""

    sandbox: Sandbox
    observer: SwitchableObserver
    labels: dict[str, str]


class KeptSandbox(WrapperSandbox):
    """The session's kernel as one turn's engine holds it: everything passes through but ``shutdown``,
    which leaves it running for the session's next turn (``dspy.RLM`` shuts down every interpreter it
    is given). A cancel still kills it."""

    def shutdown(self) -> None:
        return None


class LeasedBackend(SandboxBackend):
    """What one turn's engine sees: the first ``create`` for the lease's workspace returns the
    pre-started sandbox; anything more (or with other limits) is created cold by the real backend.
    Every sandbox made here is shut down when the lease is released, but the kernel it keeps.

    With ``kernel``, each sandbox on the lease's own workspace (the pre-started one, or one that
    replaced it after a crash) is handed out as a :class:`KeptSandbox`, observed through a switchable
    observer, and the last of them that still works is :meth:`kernel` once the turn ended."""

    def __init__(
        self, inner: SandboxBackend, warm: Started | None, labels: dict[str, str], *, kernel: bool = False
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self._warm = warm
        self._labels = labels
        self._lock = threading.Lock()
        self._keeps_kernel = kernel
        self._root: Started | None = None
        self.made: list[Sandbox] = []

    @property
    def execution_instructions(self) -> str:
        return self.inner.execution_instructions

    @property
    def isolated(self) -> bool:
        return self.inner.isolated

    def check(self) -> Any:
        return self.inner.check()

    def workspace_volume(self, directory: Path, limits: SandboxLimits) -> Volume:
        return self.inner.workspace_volume(directory, limits)

    def workspace_files(self, workspace: Path) -> WorkspaceFiles:
        return self.inner.workspace_files(workspace)

    def create(self, spec: SandboxSpec) -> Sandbox:
        with self._lock:
            warm, self._warm = self._warm, None
            reference = warm or self._root
        if warm is not None and _same_place(warm.sandbox.spec, spec, per_execution=self._keeps_kernel):
            warm.observer.target = spec.observer
            warm.labels.update(spec.labels)
            warm.sandbox.spec.limits = spec.limits  # the same but for this turn's per-execution limits
            made = warm
        else:
            if warm is not None:
                with self._lock:
                    self.made.append(warm.sandbox)
            labels = {**self._labels, **spec.labels}
            observer = SwitchableObserver()
            observer.target = spec.observer
            made = Started(
                self.inner.create(SandboxSpec(spec.workspace, spec.limits, labels, observer)), observer, labels
            )
        root = (
            self._keeps_kernel
            and reference is not None
            and made.sandbox.spec.workspace.resolve() == reference.sandbox.spec.workspace.resolve()
        )
        with self._lock:
            self.made.append(made.sandbox)
            if root:
                self._root = made
        if not root:
            return made.sandbox
        # Handed out as a fresh interpreter would be: what an earlier turn bound is not this one's.
        made.sandbox.tools = {}
        made.sandbox.output_fields = None
        return KeptSandbox(made.sandbox)

    def unused_warm(self) -> Sandbox | None:
        with self._lock:
            warm, self._warm = self._warm, None
        return warm.sandbox if warm is not None else None

    def peek_warm(self) -> Started | None:
        with self._lock:
            return self._warm

    def offer(self, warm: Started) -> None:
        """Hand out ``warm`` at the first create on its workspace (a sandbox started for the lease)."""
        with self._lock:
            self._warm = warm

    def kernel(self) -> Started | None:
        """The sandbox to keep as the session's kernel once the turn ended: the last one made on the
        lease's workspace, or the pre-started one if the turn never took it, when it still works."""
        with self._lock:
            candidate = self._root or self._warm
        if candidate is None or not candidate.sandbox.usable:
            return None
        return candidate


def _same_place(started: SandboxSpec, wanted: SandboxSpec, *, per_execution: bool = False) -> bool:
    """Whether a sandbox started for ``started`` serves ``wanted``; with ``per_execution``, limits
    that apply per execution (timeout, output) may differ, as a kernel's next turn may set them."""
    limits = wanted.limits
    if per_execution:
        limits = dataclasses.replace(
            limits,
            execution_timeout=started.limits.execution_timeout,
            max_output_chars=started.limits.max_output_chars,
        )
    return started.workspace.resolve() == wanted.workspace.resolve() and started.limits == limits


@dataclass
class Lease:
    sandbox_id: str
    directory: Path
    workspace: Workspace
    backend: LeasedBackend
    files: WorkspaceFiles
    """How the session's files go into the workspace and the turn's results come out."""
    session_id: str
    turn_id: str
    warm: bool
    labels: dict[str, str] = field(default_factory=dict)


class SandboxPool:
    def __init__(self, backend: SandboxBackend, root: Path, size: int, limits: SandboxLimits, runner: str) -> None:
        self.backend = backend
        self.root = root
        self.size = size
        self.limits = limits
        self.runner = runner
        self._idle: list[tuple[str, Started]] = []
        self._starting = 0
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.last_error: str | None = None
        self.warm_leases = 0
        self.cold_leases = 0
        self.lifecycle = ThreadLane(LIFECYCLE_THREADS, "fleet-sandbox-lifecycle")

    # Lifecycle --------------------------------------------------------------------------------

    def reap(self, runner_is_dead: Callable[[str | None], bool]) -> list[dict[str, Any]]:
        """Remove sandbox directories left by dead server processes; returns their labels."""
        reaped: list[dict[str, Any]] = []
        if not self.root.is_dir():
            return reaped
        for directory in self.root.iterdir():
            label = _read_label(directory)
            if runner_is_dead(label.get("runner")):
                remove_volume_directory(directory)
                reaped.append({"sandbox": directory.name, **label})
        for label in reaped:
            log.warning("reaped sandbox %s left by %s", label["sandbox"], label.get("runner"))
        return reaped

    def start(self) -> None:
        self._refill()

    async def close(self) -> None:
        self._closed = True
        # Not cancelled: a start in progress runs on in its thread; awaited, it tears its sandbox down.
        await asyncio.gather(*self._tasks, return_exceptions=True)
        idle, self._idle = self._idle, []
        await asyncio.gather(*(self._destroy(sandbox_id, [warm.sandbox]) for sandbox_id, warm in idle))
        self.lifecycle.close()

    @property
    def idle_count(self) -> int:
        return len(self._idle)

    # Leasing ----------------------------------------------------------------------------------

    async def acquire(self, session_id: str, turn_id: str, *, kernel: bool = False) -> Lease:
        """A fresh sandbox's lease (pre-started when the pool has one); with ``kernel``, the turn's own
        sandbox is handed out to be kept as the session's kernel (see :class:`LeasedBackend`)."""
        labels = {"runner": self.runner, "session": session_id, "turn": turn_id}
        if self._idle:
            sandbox_id, warm = self._idle.pop(0)
            self.warm_leases += 1
        else:
            sandbox_id, warm = new_id("sbx"), None
            self.cold_leases += 1
        directory = self.root / sandbox_id
        if warm is None:
            workspace = await self.lifecycle.run(self._new_workspace, directory, {**labels, "sandbox": sandbox_id})
        else:
            workspace = Workspace(warm.sandbox.spec.workspace)
            _write_label(directory, {**labels, "sandbox": sandbox_id})  # no wait: a warm lease is at once
        if warm is not None:
            warm.labels.update(labels)
        # Starting a sandbox forks this (large) process; done at once it would slow the turn that
        # just took one, so the pool refills a moment later.
        asyncio.get_running_loop().call_later(REFILL_DELAY_SECONDS, self._refill)
        backend = LeasedBackend(self.backend, warm, labels, kernel=kernel)
        return self._lease(sandbox_id, workspace, backend, labels, warm=warm is not None)

    def lease_on(self, session_id: str, turn_id: str, sandbox_id: str, workspace: Workspace, kept: Started) -> Lease:
        """The lease of a turn on its session's live kernel ``kept`` (its sandbox and directory)."""
        labels = {"runner": self.runner, "session": session_id, "turn": turn_id}
        directory = self.root / sandbox_id
        _write_label(directory, {**labels, "sandbox": sandbox_id})
        kept.labels.update(labels)
        return self._lease(
            sandbox_id, workspace, LeasedBackend(self.backend, kept, labels, kernel=True), labels, warm=True
        )

    def _lease(
        self, sandbox_id: str, workspace: Workspace, backend: LeasedBackend, labels: dict[str, str], *, warm: bool
    ) -> Lease:
        return Lease(
            sandbox_id=sandbox_id,
            directory=self.root / sandbox_id,
            workspace=workspace,
            backend=backend,
            files=backend.workspace_files(workspace.root),
            session_id=labels["session"],
            turn_id=labels["turn"],
            warm=warm,
            labels=labels,
        )

    async def release(self, lease: Lease, *, keep: Sandbox | None = None) -> None:
        """Tear down every sandbox the lease's turn used and remove its directory; with ``keep`` (the
        session's kernel), that sandbox and the directory stay."""
        sandboxes = list(lease.backend.made)
        unused = lease.backend.unused_warm()
        if unused is not None:
            sandboxes.append(unused)
        await self._destroy(lease.sandbox_id, [s for s in sandboxes if s is not keep], remove=keep is None)

    async def destroy(self, sandbox_id: str, sandboxes: list[Sandbox]) -> None:
        """Shut ``sandboxes`` down and remove the directory ``sandbox_id`` (a kernel that ended)."""
        await self._destroy(sandbox_id, sandboxes)

    async def _destroy(self, sandbox_id: str, sandboxes: list[Sandbox], *, remove: bool = True) -> None:
        def teardown() -> None:
            for sandbox in sandboxes:
                try:
                    sandbox.shutdown()
                except Exception as exc:
                    log.warning("sandbox %s: shutdown failed: %s", sandbox_id, exc)
            if remove:
                remove_volume_directory(self.root / sandbox_id)

        await self.lifecycle.run(teardown)

    def start_kernel(self, lease: Lease) -> Started:
        """The lease's pre-started sandbox, or one started now on its workspace (a cold lease): the
        session's new kernel, started before the turn so a snapshot can be restored into it."""
        warm = lease.backend.peek_warm()
        if warm is not None:
            return warm
        observer = SwitchableObserver()
        spec = SandboxSpec(lease.workspace.root, self.limits, dict(lease.labels), observer)
        sandbox = SandboxFactory(self.backend, spec)()
        try:
            sandbox.start()
        except BaseException:
            sandbox.shutdown()
            raise
        warm = Started(sandbox, observer, dict(lease.labels))
        lease.backend.offer(warm)
        return warm

    # Warm sandboxes ---------------------------------------------------------------------------

    def _refill(self) -> None:
        while not self._closed and len(self._idle) + self._starting < self.size:
            self._starting += 1
            task = asyncio.create_task(self._start_one(), name="sandbox-pool-fill")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _start_one(self) -> None:
        sandbox_id = new_id("sbx")
        directory = self.root / sandbox_id
        try:
            warm = await self.lifecycle.run(self._start_warm, sandbox_id, directory)
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.error("could not start a pooled sandbox: %s", self.last_error)
            remove_volume_directory(directory)
            return
        finally:
            self._starting -= 1
        if self._closed:
            await self._destroy(sandbox_id, [warm.sandbox])
            return
        self.last_error = None
        self._idle.append((sandbox_id, warm))

    def _new_workspace(self, directory: Path, labels: dict[str, str]) -> Workspace:
        """A fresh workspace volume in ``directory``, labelled (on a pool thread)."""
        volume = self.backend.workspace_volume(directory, self.limits)
        workspace = Workspace.create(volume.workspace, mode=SHARED_DIR_MODE)
        _write_label(directory, labels)
        return workspace

    def _start_warm(self, sandbox_id: str, directory: Path) -> Started:
        labels = {"runner": self.runner, "sandbox": sandbox_id}
        workspace = self._new_workspace(directory, labels)
        observer = SwitchableObserver()
        sandbox = SandboxFactory(self.backend, SandboxSpec(workspace.root, self.limits, labels, observer))()
        sandbox.start()
        return Started(sandbox, observer, labels)


def _write_label(directory: Path, label: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / f".{LABEL_FILE}.tmp"
    temp.write_text(json.dumps(label))
    temp.replace(directory / LABEL_FILE)


def _read_label(directory: Path) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        label = json.loads((directory / LABEL_FILE).read_text())
        if isinstance(label, dict):
            return label
    return {}
