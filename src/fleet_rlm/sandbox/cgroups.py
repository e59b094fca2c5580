"""Cgroups that bound a whole sandbox: memory (all its processes and its /tmp), process count, CPU
time, its CPU weight, and a kill that reaches every process it ever started.

Each function comes from one hierarchy. cgroup v2 where a writable cgroup2 offers it: memory, pids
and the CPU weight only when delegated (enabled in the parent's ``cgroup.subtree_control``), CPU time
(``cpu.stat``) and the kill (``cgroup.kill``) from any writable cgroup2. Otherwise cgroup v1: the
``memory``, ``pids``, ``cpuacct`` and ``cpu`` hierarchies, and ``freezer`` to kill without a race.

The CPU weight is what the sandbox, all its processes together, gets of a busy CPU against the host's
processes. Without a cpu cgroup each sandbox is a session of its own (bubblewrap's
``--new-session``), and where the kernel groups processes by session (``sched_autogroup``) every
sandbox would weigh as much as the whole host: 32 busy sandboxes left the server's event loop ~1/33
of the CPU, and a nice value set inside a session does not count across sessions. A sandbox's
cgroups are made under the host process's own cgroup in each hierarchy, so limits put on the host
also bound its sandboxes. The sandbox's first process is moved into them while it is held at its
start gate (``sandbox/gate.py``), so everything the sandbox runs is inside from its first instruction.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fleet_rlm.sandbox.owners import PREFIX, new_name

MEMORY, PIDS, CPU, KILL, WEIGHT = "memory", "pids", "CPU time", "kill", "CPU weight"
REMOVE_TIMEOUT = 2.0
FREEZE_TIMEOUT = 1.0


@dataclass(frozen=True)
class Hierarchy:
    """A writable cgroup hierarchy and the cgroup in it where Fleet makes sandbox cgroups."""

    version: int
    parent: Path
    controllers: frozenset[str]  # v1: the hierarchy's; v2: those enabled for children
    has_kill: bool = False  # v2: cgroup.kill exists (Linux 5.14+)
    has_cpu_stat: bool = False  # v2: cpu.stat with usage_usec


@dataclass(frozen=True)
class CgroupLayout:
    """Which hierarchy provides each function on this machine, and a one-line note on each."""

    memory: Hierarchy | None
    pids: Hierarchy | None
    cpu: Hierarchy | None
    kill: Hierarchy | None  # v2 with cgroup.kill, or the v1 freezer; None: kill process by process
    weight: Hierarchy | None  # v2 cpu.weight, or v1 cpu.shares
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def hierarchies(self) -> tuple[Hierarchy, ...]:
        found: list[Hierarchy] = []
        for hierarchy in (self.memory, self.pids, self.cpu, self.kill, self.weight):
            if hierarchy is not None and hierarchy not in found:
                found.append(hierarchy)
        return tuple(found)


# -- detection -----------------------------------------------------------------------------------


def _mounts() -> list[tuple[int, Path, str, frozenset[str]]]:
    """Mounted cgroup hierarchies: (version, mount point, root inside the hierarchy, controllers)."""
    found: list[tuple[int, Path, str, frozenset[str]]] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            dash = fields.index("-")
            fstype, options = fields[dash + 1], fields[dash + 3].split(",")
            root, point = fields[3], Path(fields[4].replace("\\040", " "))
            if fstype == "cgroup2":
                found.append((2, point, root, frozenset()))
            elif fstype == "cgroup":
                controllers = frozenset(o for o in options if o in V1_CONTROLLERS)
                if controllers:
                    found.append((1, point, root, controllers))
    return found


V1_CONTROLLERS = frozenset({"memory", "pids", "cpuacct", "cpu", "freezer", "cpuset", "blkio", "devices"})


def _own_cgroups() -> dict[frozenset[str], str]:
    """This process's cgroup per hierarchy (keyed by its controllers; the v2 one by none)."""
    own: dict[frozenset[str], str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            own[frozenset(c for c in controllers.split(",") if c)] = path
    return own


def _probe(parent: Path) -> tuple[bool, set[str], str]:
    """Make and remove a cgroup under ``parent``: (writable, files it has, why not)."""
    probe = parent / new_name()
    try:
        probe.mkdir()
    except OSError as exc:
        return False, set(), f"cannot create cgroups in {parent}: {exc.strerror or exc}"
    try:
        return True, {entry.name for entry in os.scandir(probe)}, ""
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


V2_DELEGATED = frozenset({"memory", "pids", "cpu"})


def _delegate_v2(parent: Path) -> frozenset[str]:
    """Enable memory, pids and cpu for the children of ``parent`` where the kernel allows; what is enabled."""
    available = set(_read(parent / "cgroup.controllers").split())
    enabled = set(_read(parent / "cgroup.subtree_control").split())
    for controller in (V2_DELEGATED & available) - enabled:
        with contextlib.suppress(OSError):  # EBUSY when the cgroup holds processes and is not the root
            _write(parent / "cgroup.subtree_control", f"+{controller}")
    return frozenset(set(_read(parent / "cgroup.subtree_control").split()) & V2_DELEGATED)


def _parents() -> list[tuple[int, Path, frozenset[str]]]:
    """Every mounted hierarchy with this process's own cgroup in it: (version, that cgroup, controllers)."""
    own = _own_cgroups()
    found = []
    for version, point, root, controllers in _mounts():
        path = own.get(controllers)
        if path is not None and (root == "/" or path == root or path.startswith(root + "/")):
            found.append((version, point / (path if root == "/" else path[len(root) :]).lstrip("/"), controllers))
    return found


def sandbox_cgroups_of(owner_pid: int) -> list[Path]:
    """The sandbox cgroups a host process made that still exist, in any hierarchy."""
    found = []
    for _, parent, _ in _parents():
        with contextlib.suppress(OSError), os.scandir(parent) as entries:
            for entry in entries:
                parts = entry.name.split("-")
                if entry.name.startswith(PREFIX) and len(parts) == 5 and parts[2] == str(owner_pid):
                    found.append(Path(entry.path))
    return found


def detect_layout(*, use_v2: bool = True) -> CgroupLayout:
    """Find the hierarchies this process can make sandbox cgroups in (each is probed)."""
    v2: Hierarchy | None = None
    v2_note = "no writable cgroup v2 hierarchy"
    v1: dict[str, Hierarchy] = {}
    v1_notes: dict[str, str] = {}
    for version, parent, controllers in _parents():
        if version == 2:
            if not use_v2 or v2 is not None:
                continue
            writable, files, why = _probe(parent)
            if not writable:
                v2_note = f"cgroup v2: {why}"
                continue
            delegated = _delegate_v2(parent)
            v2 = Hierarchy(2, parent, delegated, "cgroup.kill" in files, "cpu.stat" in files)
            continue
        writable, _, why = _probe(parent)
        for controller in controllers:
            if writable:
                v1.setdefault(controller, Hierarchy(1, parent, controllers))
            else:
                v1_notes.setdefault(controller, f"cgroup v1 {controller}: {why}")
    notes: dict[str, str] = {}

    def pick(name: str, v2_ok: bool, v2_lacks: str, v1_controller: str) -> Hierarchy | None:
        if v2 is not None and v2_ok:
            notes[name] = f"cgroup v2 at {v2.parent}"
            return v2
        chosen = v1.get(v1_controller)
        if chosen is not None:
            notes[name] = f"cgroup v1 {v1_controller} at {chosen.parent}"
        else:
            v2_why = v2_note if v2 is None else f"cgroup v2 at {v2.parent} {v2_lacks}"
            v1_why = v1_notes.get(v1_controller, f"no cgroup v1 {v1_controller} hierarchy mounted")
            notes[name] = f"{v2_why}; {v1_why}"
        return chosen

    def undelegated(controller: str) -> str:
        return f"does not delegate {controller} (not in its cgroup.subtree_control, and Fleet could not add it)"

    memory = pick(MEMORY, v2 is not None and MEMORY in v2.controllers, undelegated("memory"), "memory")
    pids = pick(PIDS, v2 is not None and PIDS in v2.controllers, undelegated("pids"), "pids")
    cpu = pick(CPU, v2 is not None and v2.has_cpu_stat, "has no cpu.stat", "cpuacct")
    kill = pick(KILL, v2 is not None and v2.has_kill, "has no cgroup.kill", "freezer")
    weight = pick(WEIGHT, v2 is not None and "cpu" in v2.controllers, undelegated("cpu"), "cpu")
    return CgroupLayout(memory, pids, cpu, kill, weight, notes)


def swap_note(hierarchy: Hierarchy) -> str:
    """How the memory cgroup keeps the sandbox from escaping into swap."""
    if hierarchy.version == 2:
        return "swap forbidden (memory.swap.max 0)"
    if (hierarchy.parent / "memory.memsw.limit_in_bytes").exists():
        return "swap included (memory.memsw limit)"
    if _swap_active():
        return "swap NOT limited (no memory.memsw files: boot with swapaccount=1)"
    return "no swap on this machine"


def _swap_active() -> bool:
    with contextlib.suppress(OSError):
        return len(Path("/proc/swaps").read_text().strip().splitlines()) > 1
    return False


# -- one sandbox's cgroups -----------------------------------------------------------------------


class SandboxCgroups:
    """The cgroups of one sandbox, one per hierarchy of the layout, all named ``name``."""

    def __init__(self, layout: CgroupLayout, name: str) -> None:
        self.layout = layout
        self.name = name
        self.dirs = {hierarchy: hierarchy.parent / name for hierarchy in layout.hierarchies}
        self._procs_fds: list[int] = []
        self._readers: dict[str, int] = {}
        self._lock = threading.Lock()

    def create(self, memory_bytes: int, max_tasks: int, cpu_weight: int) -> None:
        """Make the cgroups and set their limits; then :meth:`place` puts the first process inside."""
        try:
            for directory in self.dirs.values():
                directory.mkdir(mode=0o755)
            if self.layout.memory is not None:
                self._limit_memory(self.layout.memory, memory_bytes)
            if self.layout.pids is not None:
                _write(self.dirs[self.layout.pids] / "pids.max", str(max_tasks))
            if self.layout.weight is not None:
                self._weigh(self.layout.weight, cpu_weight)
            for directory in self.dirs.values():
                self._procs_fds.append(os.open(directory / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
            self._open_readers()
        except OSError:
            self.remove()
            raise

    def _limit_memory(self, hierarchy: Hierarchy, memory_bytes: int) -> None:
        directory = self.dirs[hierarchy]
        if hierarchy.version == 2:
            _write(directory / "memory.max", str(memory_bytes))
            if (directory / "memory.swap.max").exists():
                _write(directory / "memory.swap.max", "0")
            return
        _write(directory / "memory.limit_in_bytes", str(memory_bytes))
        if (directory / "memory.memsw.limit_in_bytes").exists():
            _write(directory / "memory.memsw.limit_in_bytes", str(memory_bytes))

    def _weigh(self, hierarchy: Hierarchy, cpu_weight: int) -> None:
        """``cpu_weight`` on cgroup v2's scale (a process at nice 0 weighs 100)."""
        if hierarchy.version == 2:
            _write(self.dirs[hierarchy] / "cpu.weight", str(cpu_weight))
        else:
            _write(self.dirs[hierarchy] / "cpu.shares", str(v1_shares(cpu_weight)))

    def place(self, pid: int) -> None:
        """Move process ``pid`` into every cgroup (the sandbox's first process, before it runs)."""
        for fd in self._procs_fds:
            os.write(fd, str(pid).encode())

    def close_fds(self) -> None:
        fds, self._procs_fds = self._procs_fds, []
        for fd in fds:
            os.close(fd)

    # -- readings (through descriptors opened at creation: a pread, not an open, per reading) -----

    def _open_readers(self) -> None:
        wanted = {
            CPU: (self.layout.cpu, "cpu.stat" if self.layout.cpu and self.layout.cpu.version == 2 else "cpuacct.usage"),
            MEMORY: (
                self.layout.memory,
                "memory.events" if self.layout.memory and self.layout.memory.version == 2 else "memory.oom_control",
            ),
            PIDS: (self.layout.pids, "pids.events"),
        }
        for function, (hierarchy, name) in wanted.items():
            if hierarchy is not None:
                self._readers[function] = os.open(self.dirs[hierarchy] / name, os.O_RDONLY | os.O_CLOEXEC)

    def _reading(self, function: str) -> str | None:
        fd = self._readers.get(function)
        if fd is None:
            return None
        try:
            return os.pread(fd, 4096, 0).decode()
        except OSError:
            return None

    def cpu_seconds(self) -> float | None:
        """CPU time used by every process of the sandbox so far (None when unknown)."""
        text = self._reading(CPU)
        if text is None or self.layout.cpu is None:
            return None
        with contextlib.suppress(ValueError):
            if self.layout.cpu.version == 2:
                return _keyed(text, "usage_usec") / 1e6
            return int(text) / 1e9
        return None

    def oom_kills(self) -> int:
        """Processes the kernel killed because the sandbox reached its memory limit."""
        text = self._reading(MEMORY)
        with contextlib.suppress(ValueError):
            return _keyed(text, "oom_kill") if text is not None else 0
        return 0

    def task_refusals(self) -> int:
        """Forks and thread starts refused because the sandbox reached its process-count limit."""
        text = self._reading(PIDS)
        with contextlib.suppress(ValueError):
            return _keyed(text, "max") if text is not None else 0
        return 0

    # -- ending ----------------------------------------------------------------------------------

    def kill_all(self, timeout: float = 5.0) -> bool:
        """SIGKILL every process in the cgroups and wait until none is left; False if some remain."""
        with self._lock:
            deadline = time.monotonic() + timeout
            kill = self.layout.kill
            if kill is not None and kill.version == 2:
                with contextlib.suppress(OSError):
                    _write(self.dirs[kill] / "cgroup.kill", "1")
            elif kill is not None:
                self._frozen_kill(self.dirs[kill], deadline)
            tracked = next(iter(self.dirs.values()), None)
            while tracked is not None and (members := _members(tracked)):
                if time.monotonic() > deadline:
                    return False
                if kill is None or kill.version == 1:
                    for pid in members:
                        _kill_member(pid, self.name)
                time.sleep(0.002)
            return True

    def _frozen_kill(self, freezer: Path, deadline: float) -> None:
        """Freeze (no fork can race the kill), SIGKILL everyone, thaw so they die."""
        try:
            _write(freezer / "freezer.state", "FROZEN")
        except OSError:
            return
        freeze_deadline = min(deadline, time.monotonic() + FREEZE_TIMEOUT)
        while _read(freezer / "freezer.state").strip() != "FROZEN" and time.monotonic() < freeze_deadline:
            time.sleep(0.001)
        for pid in _members(freezer):
            _kill_member(pid, self.name)
        with contextlib.suppress(OSError):
            _write(freezer / "freezer.state", "THAWED")

    def remove(self) -> list[str]:
        """Remove the cgroups (they must be empty); returns what could not be removed."""
        self.close_fds()
        readers, self._readers = self._readers, {}
        for fd in readers.values():
            os.close(fd)
        left = []
        for directory in self.dirs.values():
            deadline = time.monotonic() + REMOVE_TIMEOUT
            while True:
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        left.append(f"{directory}: {exc.strerror or exc}")
                        break
                    time.sleep(0.005)
        return left


def v1_shares(cpu_weight: int) -> int:
    """A v2 ``cpu.weight`` (1-10000, nice 0 = 100) as v1 ``cpu.shares`` (2-262144, nice 0 = 1024)."""
    return max(2, cpu_weight * 1024 // 100)


def reap_stale(layout: CgroupLayout, owner_is_dead: Callable[[str], bool]) -> list[str]:
    """Kill and remove sandbox cgroups whose host process is gone; returns their names."""
    stale: set[str] = set()
    for hierarchy in layout.hierarchies:
        with contextlib.suppress(OSError), os.scandir(hierarchy.parent) as entries:
            for entry in entries:
                if entry.name.startswith(PREFIX) and entry.is_dir(follow_symlinks=False) and owner_is_dead(entry.name):
                    stale.add(entry.name)
    for name in sorted(stale):
        cgroups = SandboxCgroups(layout, name)
        cgroups.kill_all(timeout=2.0)
        cgroups.remove()
    return sorted(stale)


# -- small file helpers --------------------------------------------------------------------------


def _read(path: Path) -> str:
    with open(path) as file:
        return file.read()


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _keyed(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    raise ValueError(f"no {key} in {text!r}")


def _members(directory: Path) -> list[int]:
    try:
        return [int(pid) for pid in _read(directory / "cgroup.procs").split()]
    except (OSError, ValueError):
        return []


def _kill_member(pid: int, name: str) -> None:
    """SIGKILL ``pid`` if it is (still) in the cgroup ``name``: the pidfd pins the process, so a pid
    reused after its owner exited is never signalled."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        if any(line.endswith("/" + name) for line in lines):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(pidfd)
