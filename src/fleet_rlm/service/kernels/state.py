"""A session kernel's stored state: ``sessions/<id>/kernel/state.json`` (its variables, its snapshot's
summary, how it ended) beside ``snapshot.pickle``; the changes made to it (it ended, it was restarted);
and where the session's turns ran, which says when a kernel or its state is out of date.

The event loop never touches these files itself: a write that replaces a file can wait on the disk for
tens of milliseconds while sandboxes create their volumes, and every turn's events would wait with it.
From the loop, a session's reads and changes run on a thread, one at a time per session, in the order
asked; the lifecycle threads (snapshots, which hold the kernel) use the plain methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATE_FILE = "state.json"
SNAPSHOT_FILE = "snapshot.pickle"

State = dict[str, Any]

RESTART_DETAIL = "restarted on request"
REASON_WORDS = {
    "idle": "it was idle longer than the idle timeout",
    "lru": "the server keeps a limited number of kernels and this one was the least recently used",
    "restart": "it was restarted on request",
    "server_restart": "the server restarted",
    "died": "its worker ended (a cancel, a crash or a limit)",
}


@dataclass(frozen=True)
class TurnRuns:
    """Where a session's turns ran, from the database: this turn's position, and the (position,
    runner) of each finished turn a runner claimed. A kernel, or kernel state, is out of date when a
    turn after the one it last served ran in another runner (a worker on another machine, or one
    sharing this data directory)."""

    position: int
    earlier: tuple[tuple[int, str], ...] = ()
    reset_after: int = 0
    """A restart asked of any process voided the kernels and state as of the turns up to this one."""

    def was_reset(self, position: int) -> bool:
        """Whether the kernel, or kernel state, of the turn at ``position`` was restarted since."""
        return position <= self.reset_after

    def ran_elsewhere_after(self, position: int, runner: str | None) -> bool:
        return any(p > position and r != runner for p, r in self.earlier)

    def ran_elsewhere(self, me: str) -> bool:
        return any(r != me for _, r in self.earlier)


class KernelStateFiles:
    def __init__(self, sessions_root: Path) -> None:
        self.sessions_root = sessions_root
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def directory(self, session_id: str) -> Path:
        return self.sessions_root / session_id / "kernel"

    def snapshot_path(self, session_id: str) -> Path:
        return self.directory(session_id) / SNAPSHOT_FILE

    # On a thread ------------------------------------------------------------------------------

    def read(self, session_id: str) -> State:
        with contextlib.suppress(OSError, ValueError):
            state = json.loads((self.directory(session_id) / STATE_FILE).read_text())
            if isinstance(state, dict):
                return state
        return {}

    def write(self, session_id: str, state: State) -> None:
        """Replace the state file whole; nothing when the session was deleted (before or meanwhile)."""
        directory = self.directory(session_id)
        # Each writer its own temporary file: a snapshot's thread and the loop's may write at once.
        temp = directory / f".{STATE_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            directory.mkdir(exist_ok=True)
            temp.write_text(json.dumps(state))
            temp.replace(directory / STATE_FILE)
        except FileNotFoundError:
            if directory.parent.is_dir():
                raise

    def _change(self, session_id: str, change: Callable[[State], bool]) -> None:
        state = self.read(session_id)
        if change(state):
            self.write(session_id, state)

    def _load(self, session_id: str) -> tuple[State, bool]:
        return self.read(session_id), self.snapshot_path(session_id).is_file()

    # From the event loop ----------------------------------------------------------------------

    async def load(self, session_id: str) -> tuple[State, bool]:
        """The session's state, and whether its snapshot file is there."""
        async with self._lock(session_id):
            return await asyncio.to_thread(self._load, session_id)

    async def save(self, session_id: str, state: State) -> None:
        async with self._lock(session_id):
            await asyncio.to_thread(self.write, session_id, state)

    async def change(self, session_id: str, change: Callable[[State], bool]) -> None:
        """Read the state and apply ``change`` to it (on the thread), then write it back if ``change``
        says so, as one step."""
        async with self._lock(session_id):
            await asyncio.to_thread(self._change, session_id, change)

    def _lock(self, session_id: str) -> asyncio.Lock:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = self._locks[session_id] = asyncio.Lock()
        return lock


def restart_state(states: KernelStateFiles, session_id: str, state: State) -> bool:
    """A change of the state of a session's kernel that lives nowhere: restarted on request, so its
    snapshot is dropped and its next turn is told its variables are gone. False: nothing to forget."""
    if not (state.get("snapshot") or state.get("variables")) or ending(state.get("ended"))[0] == "restart":
        return False
    state.pop("snapshot", None)
    states.snapshot_path(session_id).unlink(missing_ok=True)
    return ended_change("restart", RESTART_DETAIL)(state)


def ended_change(reason: str, detail: str) -> Callable[[State], bool]:
    """A change of a kernel's state: it ended now, for ``reason``."""
    at = time.time()

    def change(state: State) -> bool:
        state["ended"] = {"reason": reason, "detail": detail, "at": at}
        return True

    return change


def ending(ended: Any) -> tuple[str, str, float | None]:
    """The reason, words and time a kernel ended, from its stored state (none: the server restarted)."""
    if isinstance(ended, dict) and ended.get("reason") in REASON_WORDS:
        at = ended.get("at")
        return str(ended["reason"]), REASON_WORDS[ended["reason"]], at if isinstance(at, float) else None
    return "server_restart", REASON_WORDS["server_restart"], None
