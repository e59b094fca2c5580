"""Session kernels: one sandbox per session whose Python state lives on across its turns (docs/kernels.md).

A session's first turn takes a sandbox as usual; when the turn ends, that sandbox and its workspace
directory are kept (not torn down) as the session's *kernel*, and its next turn runs on it: the
variables, imports and functions of earlier turns are still there, the session's files are
refreshed in its workspace, and each turn binds its own tools, budgets and ``SUBMIT``.

Bounded: a kernel idle for ``kernel_idle_timeout`` ends, and past ``max_kernels`` the least recently
used idle one ends; its memory counts against its sandbox's limits while it waits. Lost state is said:
after each turn the kernel lists its variables and, inside the sandbox, pickles those that fit
``kernel_snapshot_mb`` into a file the host copies, as opaque bytes, into the session's storage
(``sessions/<id>/kernel/``). When the next turn finds no live kernel (evicted, timed out, restarted,
cancelled, its worker died, the server restarted), a fresh kernel loads that file (again inside the
sandbox: the host never unpickles) and the model is told what was restored and what is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import psutil
from dspy.primitives import CodeInterpreterError

from fleet_rlm.config import SandboxSettings
from fleet_rlm.engine.dspy_compat import RAW_INPUT_NAMES, sandbox_shim_names
from fleet_rlm.protocol.payloads import (
    KernelEndReason,
    KernelEvicted,
    KernelRestored,
    KernelStarted,
    LostVariable,
    Payload,
)
from fleet_rlm.sandbox import kernel_code
from fleet_rlm.sandbox.kernel_code import KernelReport, KernelVariableInfo, Lost
from fleet_rlm.service.files import FileIdentity
from fleet_rlm.service.kernels.pool import LIFECYCLE_THREADS, Lease, SandboxPool, Started
from fleet_rlm.service.kernels.state import (
    RESTART_DETAIL,
    KernelStateFiles,
    State,
    TurnRuns,
    ended_change,
    ending,
    restart_state,
)
from fleet_rlm.service.kernels.text import live_text, restored_text
from fleet_rlm.store import Conflict
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.tree import OverBound

log = logging.getLogger(__name__)

TURN_INPUTS = ("task", "workspace", "history")
EXCLUDED_NAMES = frozenset(
    {
        "SUBMIT",
        *TURN_INPUTS,
        *(raw.format(name=name) for name in TURN_INPUTS for raw in RAW_INPUT_NAMES),
        *sandbox_shim_names(),
    }
)
"""Names every turn binds itself (its inputs and their serialized payloads, ``SUBMIT``, DSPy's sandbox
shim): not the session's variables. Its tools are excluded by name too; names starting with ``_`` are
the session's like any other."""
SNAPSHOT_FRAMING = 16 * 1024 * 1024
"""Bytes a snapshot may hold past its budget: names, framing, the module list."""
SUMMARY_SECONDS = 1.0
"""How long the live kernels' memory, once read, answers health checks (while the same kernels live)."""
ELSEWHERE_WORDS = (
    "the session's last turns ran in another worker process (on another machine, or before a restart), "
    "whose kernel state is not here"
)


@dataclass
class Kernel:
    """A session's live kernel: its sandbox (started), directory and what the host knows of it."""

    session_id: str
    sandbox_id: str
    workspace: Workspace
    started: Started
    started_at: float = field(default_factory=time.time)
    idle_since: float | None = field(default_factory=time.time)
    """Wall-clock time it became idle; None while a turn (or its snapshot) runs on it."""
    variables: list[KernelVariableInfo] = field(default_factory=list)
    placed: dict[str, FileIdentity] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by a turn on the kernel and then by its snapshot."""
    turn_running: bool = False
    position: int = 0
    """The position of the last turn that ran on it."""

    @property
    def busy(self) -> bool:
        """A turn runs on it, or its snapshot is being taken: not to be ended now."""
        return self.idle_since is None or self.lock.locked()

    def memory_bytes(self) -> int | None:
        """Resident memory of the kernel's processes (its worker and what it started), or None."""
        pid = getattr(self.started.sandbox, "worker_pid", None)
        if not isinstance(pid, int):
            return None
        try:
            root = psutil.Process(pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.Error:
            return None
        total = 0
        for process in processes:
            with contextlib.suppress(psutil.Error):
                total += process.memory_info().rss
        return total


@dataclass
class KernelOpening:
    """What a turn learns of its kernel as it starts: the events to emit and what the model is told."""

    kernel: Kernel
    events: list[Payload]
    text: str


@dataclass
class KernelStatus:
    live: bool
    sandbox_id: str | None = None
    started_at: float | None = None
    idle_seconds: float | None = None
    busy: bool = False
    memory_bytes: int | None = None
    variables: list[KernelVariableInfo] = field(default_factory=list)
    snapshot: dict[str, Any] | None = None
    ended: dict[str, Any] | None = None


class KernelRegistry:
    """The live kernels of this server process, by session, least recently used first."""

    def __init__(
        self,
        pool: SandboxPool,
        sessions_root: Path,
        settings: SandboxSettings,
        existing: Callable[[Collection[str]], Awaitable[set[str]]] | None = None,
    ) -> None:
        self.pool = pool
        self._existing = existing
        """Which of these sessions are not deleted (another process may delete one whose kernel is here)."""
        self.state = KernelStateFiles(sessions_root)
        self.settings = settings
        self.live: OrderedDict[str, Kernel] = OrderedDict()
        self._sweeper: asyncio.Task[None] | None = None
        self._state_work = asyncio.Semaphore(max(1, LIFECYCLE_THREADS - 1))
        """Snapshots and restores run the session's code (up to an execution's timeout) on the pool's
        lifecycle threads, never on all of them: slow ones cannot stop every sandbox start. (A lane of
        their own, running beside the starts, raised the load benchmark's p99 lag ~1.2x.)"""
        self._summary_lock = asyncio.Lock()
        self._summary: tuple[float, tuple[int, ...], int] | None = None

    @property
    def enabled(self) -> bool:
        return self.settings.max_kernels > 0

    # Lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        if self.enabled and self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name="kernel-idle-sweeper")

    async def close(self) -> None:
        """End every kernel (the server stops); their snapshots stay for the next server."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for kernel in list(self.live.values()):
            await self._end(kernel, "server_restart", "the server stopped")

    async def _sweep(self) -> None:
        period = min(30.0, max(0.2, self.settings.kernel_idle_timeout / 4))
        while True:
            await asyncio.sleep(period)
            try:
                await self.evict_idle()
                await self.forget_deleted()
            except Exception:
                log.exception("kernel idle sweep failed")

    async def evict_idle(self) -> None:
        now = time.time()
        for kernel in list(self.live.values()):
            if not kernel.busy and now - (kernel.idle_since or now) >= self.settings.kernel_idle_timeout:
                minutes = self.settings.kernel_idle_timeout / 60
                await self._end(kernel, "idle", f"idle for more than {minutes:g} minutes")

    async def _evict_over_limit(self, keep: int) -> None:
        """End least recently used idle kernels until at most ``keep`` are live."""
        for kernel in list(self.live.values()):
            if len(self.live) <= keep:
                return
            if not kernel.busy:
                await self._end(kernel, "lru", f"more than {self.settings.max_kernels} kernels were live")

    async def _end(self, kernel: Kernel, reason: str, detail: str, *, forget_snapshot: bool = False) -> None:
        """End a live kernel (one already ended, say by a concurrent sweep, is left alone): say why in
        its state, then tear its sandbox down, even when the state cannot be written."""
        if self.live.get(kernel.session_id) is not kernel:
            return
        del self.live[kernel.session_id]
        variables = [v.to_dict() for v in kernel.variables]
        mark_ended = ended_change(reason, detail)

        def end(state: State) -> bool:
            if forget_snapshot:
                state.pop("snapshot", None)
                state["variables"] = variables
                self.state.snapshot_path(kernel.session_id).unlink(missing_ok=True)
            return mark_ended(state)

        try:
            await self.state.change(kernel.session_id, end)
        except OSError as exc:
            log.warning("kernel of session %s: its state could not be written: %s", kernel.session_id, exc)
        finally:
            log.info("kernel of session %s ended: %s", kernel.session_id, detail)
            await self.pool.destroy(kernel.sandbox_id, [kernel.started.sandbox])

    # A turn's kernel --------------------------------------------------------------------------

    async def open(self, session_id: str, turn_id: str, runs: TurnRuns) -> tuple[Lease, KernelOpening]:
        """The lease of a turn on its session's kernel: the live one, else a fresh one into which
        the session's snapshot is restored. Waits while the last turn's snapshot is still written.

        ``runs`` says where the session's turns ran: a live kernel or a snapshot older than a turn that
        ran in another runner is neither reused nor restored, and the model is told."""
        kernel = self.live.get(session_id)
        # Out of date first: the state a later turn elsewhere left (and its snapshot) is then looked at
        # afresh, restarted or not, by the stored position (:meth:`_opening`).
        if kernel is not None and runs.ran_elsewhere_after(kernel.position, self.pool.runner):
            async with kernel.lock:  # its last turn's snapshot is written first
                await self._end(kernel, "server_restart", "a later turn of the session ran in another worker process")
            kernel = None
        if kernel is not None and runs.was_reset(kernel.position):
            async with kernel.lock:
                await self._end(kernel, "restart", RESTART_DETAIL, forget_snapshot=True)
            kernel = None
        if kernel is not None:
            await kernel.lock.acquire()
            if self.live.get(session_id) is kernel and kernel.started.sandbox.usable:
                kernel.idle_since = None
                kernel.turn_running = True
                kernel.position = runs.position
                self.live.move_to_end(session_id)
                lease = self.pool.lease_on(session_id, turn_id, kernel.sandbox_id, kernel.workspace, kernel.started)
                return lease, KernelOpening(kernel, [], live_text(kernel.variables))
            kernel.lock.release()
            if self.live.get(session_id) is kernel:
                await self._end(kernel, "died", "its worker ended while it was idle")
        await self._evict_over_limit(self.settings.max_kernels - 1)
        lease = await self.pool.acquire(session_id, turn_id, kernel=True)
        try:
            started = await self.pool.lifecycle.run(self.pool.start_kernel, lease)
        except BaseException:
            await self.pool.release(lease)
            raise
        kernel = Kernel(
            session_id,
            lease.sandbox_id,
            lease.workspace,
            started,
            idle_since=None,
            turn_running=True,
            position=runs.position,
        )
        await kernel.lock.acquire()
        self.live[session_id] = kernel
        try:
            return lease, await self._opening(kernel, lease, runs)
        except BaseException:  # the turn never gets its lease: the kernel ends here
            if self.live.get(session_id) is kernel:
                del self.live[session_id]
            kernel.lock.release()
            await self.pool.release(lease)
            raise

    async def _opening(self, kernel: Kernel, lease: Lease, runs: TurnRuns) -> KernelOpening:
        """What a fresh kernel's turn is told: the state it restored from the session's snapshot, and
        what is gone."""
        session_id = kernel.session_id
        events: list[Payload] = []
        state, has_snapshot = await self.state.load(session_id)
        position = state.get("position")
        restarted = isinstance(position, int) and runs.was_reset(position)  # elsewhere, while none lived here
        if restarted and await asyncio.to_thread(restart_state, self.state, session_id, state):
            has_snapshot = False
        elsewhere = self._state_out_of_date(state, runs)
        if elsewhere:
            state = {}
            events.append(KernelEvicted(reason="server_restart", detail=ELSEWHERE_WORDS, at=None))
        ended = state.get("ended")
        known = state.get("variables") or []
        if known or state.get("snapshot"):
            reason, detail, at = ending(ended)
            events.append(KernelEvicted(reason=cast(KernelEndReason, reason), detail=detail, at=at))
        events.append(KernelStarted(sandbox_id=lease.sandbox_id))
        restored = KernelReport()
        if state.get("snapshot") and has_snapshot:
            saved = kernel_code.parse_report({"saved": state["snapshot"].get("saved")}).saved
            async with self._state_work:
                restored = await self.pool.lifecycle.run(self._restore, lease, kernel, saved)
        lost = _lost_after_restore(known, state.get("snapshot") or {}, restored)
        if known or restored.restored:
            events.append(
                KernelRestored(
                    restored=restored.restored,
                    lost=[LostVariable(name=item.name, reason=item.reason) for item in lost],
                )
            )
            kernel.variables = [v for v in _infos(known) if v.name in set(restored.restored)]
        text = restored_text(kernel.variables, lost, ending(ended)[1]) if known else ""
        if elsewhere:
            text = restored_text([], [], ELSEWHERE_WORDS)
        state["ended"] = None
        state["runner"] = self.pool.runner
        state["position"] = runs.position
        await self.state.save(session_id, state)
        return KernelOpening(kernel, events, text)

    def _state_out_of_date(self, state: dict[str, Any], runs: TurnRuns) -> bool:
        """The kernel state this data directory holds is older than a turn that ran in another runner;
        or there is none here and earlier turns ran in another process (nothing to restore, but the
        model is told)."""
        position, runner = state.get("position"), state.get("runner")
        if isinstance(position, int):
            return runs.ran_elsewhere_after(position, runner if isinstance(runner, str) else None)
        return runner is None and runs.ran_elsewhere(self.pool.runner)

    def _restore(self, lease: Lease, kernel: Kernel, saved: list[str]) -> KernelReport:
        source = self.state.snapshot_path(kernel.session_id)
        try:
            lease.files.push(source, kernel_code.SNAPSHOT_REL)
            return kernel_code.restore(kernel.started.sandbox)
        except (OSError, CodeInterpreterError, SyntaxError) as exc:
            log.warning("session %s: the snapshot could not be restored: %s", kernel.session_id, exc)
            why = f"the snapshot could not be loaded ({type(exc).__name__})"
            return KernelReport(lost=[Lost(name, why) for name in saved])

    async def finish(self, kernel: Kernel, lease: Lease) -> None:
        """After a turn (its end committed): keep the kernel when its sandbox still works, list its
        variables and snapshot them; else it ended (a cancel, a crash) and its directory goes."""
        kernel.turn_running = False
        kernel.idle_since = time.time()
        try:
            kept = lease.backend.kernel()
            await self.pool.release(lease, keep=kept.sandbox if kept is not None else None)
            if kept is None:
                if self.live.get(kernel.session_id) is kernel:
                    del self.live[kernel.session_id]
                await self.state.change(kernel.session_id, ended_change("died", "its worker ended during the turn"))
                return
            kept.observer.target = None
            kernel.started = kept
            async with self._state_work:
                await self.pool.lifecycle.run(self._snapshot, kernel, lease, set(EXCLUDED_NAMES))
        finally:
            kernel.lock.release()
        await self._evict_over_limit(self.settings.max_kernels)

    def _snapshot(self, kernel: Kernel, lease: Lease, exclude: set[str]) -> None:
        budget = self.settings.kernel_snapshot_mb * 1024 * 1024
        try:
            found = kernel_code.report(kernel.started.sandbox, exclude, snapshot_budget=budget or None)
        except (CodeInterpreterError, SyntaxError) as exc:
            log.warning("session %s: the kernel could not list its variables: %s", kernel.session_id, exc)
            return
        kernel.variables = found.variables
        state = self.state.read(kernel.session_id)
        state["variables"] = [v.to_dict() for v in found.variables]
        state["modules"] = found.modules
        state["ended"] = None
        state["runner"] = self.pool.runner
        state["position"] = kernel.position
        if budget:
            state["snapshot"] = self._take_snapshot(kernel, lease, found, budget)
        self.state.write(kernel.session_id, state)

    def _take_snapshot(self, kernel: Kernel, lease: Lease, found: KernelReport, budget: int) -> dict[str, Any] | None:
        """Copy the snapshot the kernel wrote, at most ``budget`` plus framing: counted as it is read, so
        a file that grows while the host copies it (code left running in the kernel) is refused too."""
        target = self.state.snapshot_path(kernel.session_id)
        limit = budget + SNAPSHOT_FRAMING
        try:
            if kernel.workspace.tree.entry(kernel_code.SNAPSHOT_REL) is None:  # not written, or not a regular file
                return None
            target.parent.mkdir(parents=True, exist_ok=True)
            temp = target.with_suffix(".tmp")
            size = lease.files.pull(kernel_code.SNAPSHOT_REL, temp, limit=limit)
            os.replace(temp, target)
        except OverBound as exc:
            log.warning(
                "session %s: the snapshot was not kept (its budget is %d bytes): %s", kernel.session_id, limit, exc
            )
            return None
        except OSError as exc:
            log.warning("session %s: the snapshot could not be taken: %s", kernel.session_id, exc)
            return None
        finally:
            kernel.workspace.tree.remove(kernel_code.SNAPSHOT_REL)
        return {
            "saved": found.saved,
            "lost": [item.to_dict() for item in found.lost],
            "bytes": size,
            "at": time.time(),
        }

    # Control ----------------------------------------------------------------------------------

    async def restart(self, session_id: str) -> None:
        """End the session's kernel and drop its snapshot: its next turn starts from nothing and is
        told its variables are gone. Conflict while a turn runs on it."""
        kernel = self.live.get(session_id)
        if kernel is None:
            await self.state.change(session_id, lambda state: restart_state(self.state, session_id, state))
            return
        if kernel.turn_running:
            raise Conflict("a turn is running on this session's kernel; cancel it first", code="kernel_busy")
        async with kernel.lock:  # the last turn's snapshot is still being written
            if kernel.turn_running:
                raise Conflict("a turn is running on this session's kernel; cancel it first", code="kernel_busy")
            await self._end(kernel, "restart", RESTART_DETAIL, forget_snapshot=True)

    async def forget(self, session_id: str) -> None:
        """The session was deleted: end its kernel (its storage goes with the session)."""
        kernel = self.live.pop(session_id, None)
        if kernel is not None:
            await self.pool.destroy(kernel.sandbox_id, [kernel.started.sandbox])

    async def forget_deleted(self) -> None:
        """End the kernels of sessions deleted through another process (which ends only its own), once
        their last snapshot is written, and drop their kernel state here."""
        if self._existing is None or not self.live:
            return
        asked = dict(self.live)  # a kernel opened while the database answers is not in its answer
        kept = await self._existing(list(asked))
        for session_id, kernel in asked.items():
            if session_id in kept:
                continue
            async with kernel.lock:
                if self.live.get(session_id) is not kernel:
                    continue
                await self.forget(session_id)
            await asyncio.to_thread(shutil.rmtree, self.state.directory(session_id), ignore_errors=True)
            log.info("kernel of session %s ended: the session was deleted", session_id)

    async def settled(self, session_id: str) -> None:
        """Wait until the last turn's snapshot of the session's kernel is taken (not for a turn)."""
        kernel = self.live.get(session_id)
        if kernel is not None and not kernel.turn_running:
            async with kernel.lock:
                pass

    def status(self, session_id: str) -> KernelStatus:
        state = self.state.read(session_id)
        snapshot = state.get("snapshot")
        kernel = self.live.get(session_id)
        if kernel is None:
            return KernelStatus(live=False, snapshot=snapshot, ended=state.get("ended"), variables=[])
        idle = None if kernel.turn_running or kernel.idle_since is None else max(0.0, time.time() - kernel.idle_since)
        return KernelStatus(
            live=True,
            sandbox_id=kernel.sandbox_id,
            started_at=kernel.started_at,
            idle_seconds=idle,
            busy=kernel.turn_running,
            memory_bytes=kernel.memory_bytes(),
            variables=list(kernel.variables),
            snapshot=snapshot,
        )

    async def summary(self) -> tuple[int, int]:
        """How many kernels are live and their resident memory in bytes (for health and doctor). The
        memory is read off the event loop (finding each kernel's processes scans all of /proc), by one
        caller at a time, and answers the others for :data:`SUMMARY_SECONDS` while the same kernels live:
        polled health checks neither hold the loop nor fill its default executor."""
        async with self._summary_lock:
            kernels = list(self.live.values())
            which = tuple(id(kernel) for kernel in kernels)
            kept = self._summary
            if kept is not None and kept[1] == which and time.monotonic() - kept[0] < SUMMARY_SECONDS:
                return len(kernels), kept[2]
            memory = await asyncio.to_thread(lambda: sum(kernel.memory_bytes() or 0 for kernel in kernels))
            self._summary = (time.monotonic(), which, memory)
            return len(kernels), memory


def _infos(known: list[Any]) -> list[KernelVariableInfo]:
    return kernel_code.parse_report({"variables": known}).variables


def _lost_after_restore(known: list[Any], snapshot: dict[str, Any], restored: KernelReport) -> list[Lost]:
    """Every variable known from earlier turns that the fresh kernel does not hold, and why."""
    why = {item.name: item.reason for item in kernel_code.parse_report({"lost": snapshot.get("lost")}).lost}
    why.update({item.name: item.reason for item in restored.lost})
    back = set(restored.restored)
    default = "not in the snapshot" if snapshot else "no snapshot holds it"
    return [Lost(v.name, why.get(v.name, default)) for v in _infos(known) if v.name not in back]
