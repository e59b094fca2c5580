"""A session kernel's stored state: ``sessions/<id>/kernel/state.json`` (its variables, its snapshot's
summary, how it ended) beside ``snapshot.pickle``.

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
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

STATE_FILE = "state.json"
SNAPSHOT_FILE = "snapshot.pickle"

State = dict[str, Any]


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
