"""What the soak measures about one running ``fleet serve``, from outside it: memory, file descriptors,
processes, sandbox cgroups and /tmp mounts, scratch directories, and the SQLite file's size.

Each reading is taken when the server has settled (no turn running, its sandbox pool refilled), so two
readings differ only by what a run left behind.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import psutil

from fleet_rlm.sandbox.cgroups import sandbox_cgroups_of
from fleet_rlm.sandbox.scratch import DEFAULT_STATE_ROOT, state_of
from fleet_rlm.testing.processes import live_sandbox_pids

# Directories under Fleet's data dir that hold per-turn or per-sandbox scratch (the rest is durable data).
SCRATCH_DIRS = ("sandboxes", "children", "runs", "workspaces", "tmp")


@dataclass(frozen=True)
class Server:
    """The server process under test and where it keeps things."""

    pid: int
    home: Path  # FLEET_HOME: the data dir
    tmpdir: Path  # its private TMPDIR
    model_port: int  # the model endpoint's port: connections to it are the HTTP client's pool


@dataclass(frozen=True)
class Reading:
    turns: int
    rss_bytes: int
    fds: int  # open file descriptors besides connections to the model endpoint
    model_connections: int  # idle keep-alive connections the model client pools
    descendants: int  # processes below the server (its sandboxes' bubblewrap and workers)
    sandbox_processes: int
    cgroups: int
    tmp_mounts: int  # sandbox /tmp mounts and state directories under /run/fleet/sandboxes
    scratch_entries: int  # entries in SCRATCH_DIRS plus the server's private TMPDIR
    db_bytes: int
    events: int
    fd_kinds: dict[str, int]

    @property
    def leak_signature(self) -> tuple[int, ...]:
        """The figures that must come back to the same value whenever the server is idle."""
        return (self.fds, self.descendants, self.sandbox_processes, self.cgroups, self.tmp_mounts, self.scratch_entries)

    def as_dict(self) -> dict[str, Any]:
        return {field.name: getattr(self, field.name) for field in fields(self)}


def fd_kinds(server: Server) -> dict[str, int]:
    """The server's open file descriptors by what they are: a file's name, ``pipe``, ``anon_inode``, and
    sockets (``socket:listening``, ``socket:model``, ``socket:<remote port>``, ``socket:unix``)."""
    process = psutil.Process(server.pid)
    sockets: dict[int, str] = {}
    with contextlib.suppress(psutil.Error):
        for connection in process.net_connections(kind="all"):
            if connection.status == psutil.CONN_LISTEN:
                sockets[connection.fd] = "socket:listening"
            elif isinstance(connection.raddr, tuple) and connection.raddr:
                port = connection.raddr[1]
                sockets[connection.fd] = "socket:model" if port == server.model_port else f"socket:{port}"
            else:
                sockets[connection.fd] = "socket:unix" if connection.family == socket.AF_UNIX else "socket:other"
    kinds: Counter[str] = Counter()
    for entry in os.scandir(f"/proc/{server.pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(entry.path)
            if target.startswith("socket:"):
                kinds[sockets.get(int(entry.name), "socket:other")] += 1
            else:
                kinds[target.split(":", 1)[0] if target.endswith("]") else Path(target).name] += 1
    return dict(sorted(kinds.items()))


def scratch_entries(server: Server) -> list[Path]:
    directories = [server.home / name for name in SCRATCH_DIRS] + [server.tmpdir]
    return [entry for directory in directories if directory.exists() for entry in directory.iterdir()]


def database_size(path: Path) -> tuple[int, int]:
    """(bytes, events) of the SQLite database as its newest snapshot has them (the WAL included, so the
    figure does not jump when SQLite checkpoints)."""
    if not path.exists():
        return 0, 0
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        page_size = int(connection.execute("PRAGMA page_size").fetchone()[0])
        pages = int(connection.execute("PRAGMA page_count").fetchone()[0])
        events = int(connection.execute("SELECT count(*) FROM events").fetchone()[0])
    finally:
        connection.close()
    return page_size * pages, events


def read(server: Server, turns: int) -> Reading:
    process = psutil.Process(server.pid)
    db_bytes, events = database_size(server.home / "fleet.db")
    kinds = fd_kinds(server)
    model_connections = kinds.get("socket:model", 0)
    return Reading(
        turns=turns,
        rss_bytes=process.memory_info().rss,
        fds=sum(kinds.values()) - model_connections,
        model_connections=model_connections,
        descendants=len(process.children(recursive=True)),
        sandbox_processes=len(live_sandbox_pids(under=server.home)),
        cgroups=len(sandbox_cgroups_of(server.pid)),
        tmp_mounts=len(state_of(DEFAULT_STATE_ROOT, server.pid)),
        scratch_entries=len(scratch_entries(server)),
        db_bytes=db_bytes,
        events=events,
        fd_kinds=kinds,
    )


def settled(server: Server, turns: int, *, timeout: float = 30.0) -> Reading:
    """A reading once the leak figures have held still for three polls (the pool refills in the
    background after turns end); the last reading when they never do."""
    deadline = time.monotonic() + timeout
    history: list[Reading] = []
    while True:
        history.append(read(server, turns))
        recent = {reading.leak_signature for reading in history[-3:]}
        if (len(history) >= 3 and len(recent) == 1) or time.monotonic() > deadline:
            return history[-1]
        time.sleep(0.4)


def leftovers_after_exit(server: Server, *, grace: float = 5.0) -> dict[str, list[str]]:
    """What a stopped server left behind: sandbox processes, cgroups, /tmp mounts, scratch entries
    (given ``grace`` seconds for processes it killed to be gone)."""
    deadline = time.monotonic() + grace
    while live_sandbox_pids(under=server.home) and time.monotonic() < deadline:
        time.sleep(0.1)
    return {
        "sandbox_processes": [str(pid) for pid in sorted(live_sandbox_pids(under=server.home))],
        "cgroups": [str(path) for path in sandbox_cgroups_of(server.pid)],
        "tmp_mounts": [str(path) for path in state_of(DEFAULT_STATE_ROOT, server.pid)],
        "scratch": sorted(str(entry) for entry in scratch_entries(server)),
    }
