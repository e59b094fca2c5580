"""Load on the durable service: many concurrent sessions, each running one multi-iteration turn.

Run: ``uv run python benchmarks/load_bench.py [--sessions 50] [--iterations 3] [--delay 0.05]
[--pool 2] [--max-running N] [--database-url URL] [--workers 0,1,2] [--turn-processes 0,2]
[--submit separate,streamed]``.

A real ``fleet serve`` process (SQLite under a temporary FLEET_HOME; with ``--database-url``, each
run on a new empty PostgreSQL database beside the one named, dropped after it) serves a scripted model that answers
every call after ``--delay`` seconds; each session's turn prints on ``iterations - 1`` iterations
and submits on the last. All turns are submitted at once and streamed over SSE: by default each client
POSTs its turn with ``Accept: text/event-stream`` and reads the events in that response (``--submit
streamed``, as Fleet's own clients submit); ``separate`` POSTs its turn, then GETs its event stream. Reported:

- turns per second: sessions / (first submission to last terminal event), after one unmeasured
  warm-up turn (a process's first model call pays one-off imports);
- time to first event (the client starting its POST to the first SSE event received), p50 and p99;
  and the same from the moment the POST's body was written out, with the client's own delay before it
  (one client process sends all 50 submissions, building them one after another on its event loop: a
  wait no person submitting alone has);
- event delivery lag (SSE receipt time minus the event's ``ts``), p50 and p99 over all events;
- peak memory: the server process's peak RSS, and the peak summed RSS of the server and all its
  sandboxes, sampled every 50 ms;
- sandbox pool: acquire latency of a pre-started sandbox against a cold start (each to the first
  execution's result), medians over ``--pool-repeats``.

``--workers`` (PostgreSQL only) measures topologies side by side in one run, each on a fresh copy of
the database's schema: ``0`` is ``fleet serve`` running its turns itself; ``N`` is an API replica
(``--no-workers``) and N ``fleet worker`` processes. It prints each report, then the throughput and
event-lag ratios against the first topology listed. Memory figures cover the API process's tree only.
``--turn-processes`` crosses each topology with ``worker.turn_processes`` values (0: engines on the
threads of the process that runs turns; N: in N turn processes of each such process), also on SQLite.
``--code before=/tmp/old/src,after=src`` crosses them with source trees (each run with that tree first on
PYTHONPATH, e.g. a ``git worktree`` of an earlier commit), to compare a change side by side in one run.

The scripted model and the memory sampler run in processes of their own, so the load client's event
loop (which stamps each receipt) never waits for their interpreter lock; everything still shares the
machine's cores. Lag is also reported per event type, and CPU seconds over the load per part: the
server process, its turn processes, and the whole machine (from /proc/stat).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import multiprocessing
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from fleet_rlm.models.scripted import ScriptedModel, ScriptedModelServer, rlm_step
from fleet_rlm.sandbox.base import SandboxLimits
from fleet_rlm.sandbox.local import LocalSandboxBackend
from fleet_rlm.service.kernels.pool import SandboxPool
from fleet_rlm.service.turns.processes.processes import CHILD_MODULE
from fleet_rlm.testing.sse import aevent_frames

STEP_MARK = "load-bench-step"


def responder(iterations: int, delay: float) -> Any:
    def answer(request: dict[str, Any]) -> str:
        time.sleep(delay)
        if request.get("model") != "root":
            return "sub answer"
        prompt = json.dumps(request.get("messages", []))
        done = len(re.findall(rf"print\(\\*'{STEP_MARK} (\d+)", prompt))
        if done + 1 >= iterations:
            return rlm_step("Done.", "SUBMIT(answer='ok')")
        return rlm_step(f"Step {done + 1}.", f"print('{STEP_MARK} {done + 1}')")

    return answer


@dataclass
class TurnTiming:
    submitted: float = 0.0
    sent: float = 0.0
    """When the submission's request was written out: one client process sending 50 at once builds them
    one after another on its own event loop, a wait no person submitting alone has."""
    accepted: float = 0.0
    first_event: float = 0.0
    first_emitted: float = 0.0
    finished: float = 0.0
    lags: list[float] = field(default_factory=list)
    lag_types: list[str] = field(default_factory=list)
    events: int = 0
    iterations: int = 0
    terminal: str = ""

    async def trace(self, name: str, _info: dict[str, Any]) -> None:
        """httpcore's request trace: stamps :attr:`sent` once the submission's body is written."""
        if name == "http11.send_request_body.complete" and not self.sent:
            self.sent = time.time()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
TREE_SCAN_EVERY = 10
"""Samples between two scans of /proc for the tree's processes: the scan reads every process's stat,
and at every sample it took ~20% of a core from the two the load runs on."""


class MemorySampler:
    """Peak RSS of a process and of its whole process tree, sampled from /proc every ``interval`` seconds
    in a process of its own (scanning /proc takes CPU the load client's event loop should not wait on).
    A sample reads the RSS of the processes found by the last scan of the tree."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_tree_kb = 0
        context = multiprocessing.get_context("fork")
        self._stop = context.Event()
        self._result, self._send = context.Pipe(duplex=False)
        self._process = context.Process(target=self._run, daemon=True)

    def _tree(self) -> list[int]:
        """The process and all its descendants now (a scan of every process's parent in /proc)."""
        children: dict[int, list[int]] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
        found, stack = [], [self.pid]
        while stack:
            pid = stack.pop()
            found.append(pid)
            stack.extend(children.get(pid, []))
        return found

    @staticmethod
    def _rss_kb(pid: int) -> int:
        try:
            return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_KB
        except (OSError, ValueError, IndexError):
            return 0  # ended since the tree was scanned

    def _run(self) -> None:
        peak, tree = 0, [self.pid]
        for sample in itertools.count():
            if self._stop.is_set():
                break
            if sample % TREE_SCAN_EVERY == 0:
                tree = self._tree()
            peak = max(peak, sum(self._rss_kb(pid) for pid in tree))
            self._stop.wait(self.interval)
        self._send.send(peak)

    def start(self) -> None:
        self._process.start()

    def stop(self) -> None:
        self._stop.set()
        if not self._result.poll(30):
            raise RuntimeError("the memory sampler process did not report")
        self.peak_tree_kb = self._result.recv()
        self._process.join()

    def process_peak_kb(self) -> int:
        match = re.search(r"VmHWM:\s+(\d+)", Path(f"/proc/{self.pid}/status").read_text())
        return int(match[1]) if match else 0


class ModelProcess:
    """The scripted model in a process of its own, standing in for a provider on another machine: its
    request handling must not hold the load client's interpreter lock while the client stamps receipts."""

    def __init__(self, iterations: int, delay: float) -> None:
        context = multiprocessing.get_context("fork")
        self._address, self._send = context.Pipe(duplex=False)
        self._stop = context.Event()
        self._process = context.Process(target=self._serve, args=(iterations, delay), daemon=True)
        self.base_url = ""

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    def _serve(self, iterations: int, delay: float) -> None:
        with ScriptedModelServer(ScriptedModel(default=responder(iterations, delay))) as server:
            self._send.send(server.base_url)
            self._stop.wait()

    def __enter__(self) -> ModelProcess:
        self._process.start()
        if not self._address.poll(30):
            raise RuntimeError("the scripted model process did not start")
        self.base_url = self._address.recv()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._process.join(timeout=10)


def cpu_by_part(server_pid: int, model_pid: int) -> dict[str, float]:
    """CPU seconds used so far by the server process, by its turn processes (those alive now: one replaced
    during the run loses its share), by the children it has reaped (sandboxes that ended), by the scripted
    model, by this load client, and by the whole machine (busy time of all cores, /proc/stat). In worker
    topologies the turn processes are the workers' and are not counted here; the machine's figure covers
    them."""
    server = psutil.Process(server_pid)
    own = server.cpu_times()
    model = psutil.Process(model_pid).cpu_times()
    client = psutil.Process().cpu_times()
    turn_processes = 0.0
    for child in server.children():
        with contextlib.suppress(psutil.Error):
            if CHILD_MODULE in child.cmdline():
                times = child.cpu_times()
                turn_processes += times.user + times.system
    machine = psutil.cpu_times()
    busy = machine.user + machine.nice + machine.system + machine.irq + machine.softirq + machine.steal
    return {
        "server": own.user + own.system,
        "turn processes": turn_processes,
        "reaped children": own.children_user + own.children_system,
        "scripted model": model.user + model.system,
        "load client": client.user + client.system,
        "machine": busy,
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


STREAM_TIMEOUT = httpx.Timeout(30, read=600)
SUBMIT_FLOWS = {"separate": "POST, then GET the stream", "streamed": "one POST, Accept: text/event-stream"}


async def run_turn(client: httpx.AsyncClient, session_id: str, timing: TurnTiming, submit: str = "streamed") -> None:
    timing.submitted = time.time()
    url, body = f"/sessions/{session_id}/turns", {"message": "count to three"}
    if submit == "streamed":
        headers = {"Accept": "text/event-stream"}
        traced = {"trace": timing.trace}
        async with client.stream(
            "POST", url, json=body, headers=headers, timeout=STREAM_TIMEOUT, extensions=traced
        ) as stream:
            stream.raise_for_status()
            timing.accepted = time.time()
            await follow(stream, timing)
        return
    accepted = await client.post(url, json=body, extensions={"trace": timing.trace})
    accepted.raise_for_status()
    timing.accepted = time.time()
    turn_id = accepted.json()["id"]
    async with client.stream("GET", f"/turns/{turn_id}/events", timeout=STREAM_TIMEOUT) as stream:
        await follow(stream, timing)


async def follow(stream: httpx.Response, timing: TurnTiming) -> None:
    """Read the turn's events to its terminal one, stamping each receipt."""
    async for frame in aevent_frames(stream):
        now = time.time()
        event = frame.json()
        if not timing.events:
            timing.first_event = now
            timing.first_emitted = float(event["ts"])
        timing.events += 1
        timing.lags.append(now - float(event["ts"]))
        timing.lag_types.append(event["type"])
        if event["type"] == "iteration.started":
            timing.iterations += 1
        if event["type"] in ("turn.completed", "turn.failed", "turn.cancelled", "turn.interrupted"):
            timing.terminal = event["type"]
            timing.finished = now
            return


async def warm_up_client(base_url: str, requests: int) -> None:
    """``requests`` concurrent GETs on connections of their own, closed after: the first burst a client
    process sends is slower to leave it (~100 ms against ~30 ms for the 50 submissions), so each run's
    burst is the client's second."""
    limits = httpx.Limits(max_connections=requests, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base_url + "/api/v1", limits=limits, timeout=60) as client:
        answers = await asyncio.gather(*(client.get("/health") for _ in range(requests)))
    for answer in answers:
        answer.raise_for_status()


async def load(base_url: str, sessions: int, submit: str = "streamed") -> list[TurnTiming]:
    await warm_up_client(base_url, sessions)
    limits = httpx.Limits(max_connections=sessions * 2 + 10, max_keepalive_connections=sessions * 2)
    async with httpx.AsyncClient(base_url=base_url + "/api/v1", limits=limits, timeout=60) as client:
        # One turn first, unmeasured: the first model call in a process pays one-off imports and set-up.
        warm_up = await client.post("/sessions", json={"name": "warm-up"})
        await run_turn(client, warm_up.json()["id"], TurnTiming(), submit)
        await asyncio.sleep(1.0)  # the pool refills
        ids = []
        for index in range(sessions):
            created = await client.post("/sessions", json={"name": f"load-{index}"})
            created.raise_for_status()
            ids.append(created.json()["id"])
        timings = [TurnTiming() for _ in ids]
        await asyncio.gather(*(run_turn(client, sid, t, submit) for sid, t in zip(ids, timings, strict=True)))
    return timings


def pool_latency(repeats: int) -> tuple[float, float]:
    """Median seconds from asking for a sandbox to its first execution's result: warm pool vs cold."""
    backend = LocalSandboxBackend()
    limits = SandboxLimits()

    async def measure(pool_size: int) -> list[float]:
        with tempfile.TemporaryDirectory(prefix="fleet-pool-bench-") as root:
            pool = SandboxPool(backend, Path(root), pool_size, limits, f"bench:{os.getpid()}:x")
            pool.start()
            laps: list[float] = []
            for index in range(repeats):
                while pool_size and pool.idle_count < pool_size:
                    await asyncio.sleep(0.01)
                started = time.perf_counter()
                lease = await pool.acquire("ses_bench", f"turn_{index}")
                spec_sandbox = await asyncio.to_thread(_first_execution, lease)
                laps.append(time.perf_counter() - started)
                del spec_sandbox
                await pool.release(lease)
            await pool.close()
            return laps

    def _first_execution(lease: Any) -> None:
        from fleet_rlm.sandbox.base import SandboxSpec

        sandbox = lease.backend.create(SandboxSpec(lease.workspace.root, limits))
        sandbox.start()
        sandbox.execute("1 + 1")

    warm = asyncio.run(measure(1))
    cold = asyncio.run(measure(0))
    return statistics.median(warm), statistics.median(cold)


def start_process(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(command, env=env, cwd=log.parent, stdout=out, stderr=subprocess.STDOUT)


def wait_healthy(base_url: str, process: subprocess.Popen[bytes], log: Path) -> bool:
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(base_url + "/api/v1/health", timeout=1).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            print(log.read_text()[-3000:], file=sys.stderr)
            return False
        time.sleep(0.1)


def wait_workers(logs: list[Path]) -> None:
    deadline = time.monotonic() + 120
    while not all(b"runs turns from" in log.read_bytes() for log in logs):
        if time.monotonic() > deadline:
            raise RuntimeError("a worker did not start")
        time.sleep(0.1)


def fresh_database(url: str, name: str) -> str:
    """A new empty database beside ``url``'s (same server), for one topology's run."""
    _admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
    return url.rsplit("/", 1)[0] + "/" + name


def drop_database(url: str, name: str) -> None:
    """Remove a run's database once its report is made (nothing is left on the server)."""
    _admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _admin(url: str, *statements: str) -> None:
    """Run ``statements`` on the server of ``url``, connected to its database."""
    import asyncpg

    async def run() -> None:
        connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
        try:
            for statement in statements:
                await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(run())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds the scripted model takes per answer")
    parser.add_argument("--pool", type=int, default=2, help="FLEET_SANDBOX_POOL_SIZE of the server")
    parser.add_argument("--max-running", type=int, help="FLEET_MAX_RUNNING_TURNS of the server (default: its own)")
    parser.add_argument("--database-url", help="FLEET_DATABASE_URL (default: SQLite in a temporary FLEET_HOME)")
    parser.add_argument("--pool-repeats", type=int, default=15)
    parser.add_argument(
        "--workers",
        help="topologies to compare, e.g. 0,1,2: 0 = fleet serve runs turns; N = API replica + N fleet workers "
        "(needs --database-url on PostgreSQL)",
    )
    parser.add_argument(
        "--code",
        help="source trees to compare, as LABEL=DIR pairs separated by commas (default: the installed package)",
    )
    parser.add_argument(
        "--turn-processes",
        help="worker.turn_processes values to compare, e.g. 0,2 (default: the setting's default)",
    )
    parser.add_argument(
        "--submit",
        default="streamed",
        help="client flows to compare, e.g. separate,streamed (repeat them to interleave): "
        + "; ".join(f"{name}: {words}" for name, words in SUBMIT_FLOWS.items()),
    )
    args = parser.parse_args()
    flows = args.submit.split(",")
    if any(flow not in SUBMIT_FLOWS for flow in flows):
        parser.error(f"--submit takes {', '.join(SUBMIT_FLOWS)}, separated by commas")
    worker_counts: list[int | None] = [int(part) for part in args.workers.split(",")] if args.workers else [None]
    process_counts: list[int | None] = (
        [int(part) for part in args.turn_processes.split(",")] if args.turn_processes else [None]
    )
    if args.workers and not (args.database_url or "").startswith("postgresql"):
        parser.error("--workers needs --database-url postgresql+asyncpg://...")
    trees: list[tuple[str, str] | None] = [None]
    if args.code:
        pairs = [part.partition("=") for part in args.code.split(",")]
        if any(not label or not tree for label, _, tree in pairs):
            parser.error("--code takes LABEL=DIR pairs separated by commas")
        trees = [(label, tree) for label, _, tree in pairs]
    combinations = [(w, p, t, f) for t in trees for w in worker_counts for p in process_counts for f in flows]
    reports = []
    for index, (workers, processes, tree, flow) in enumerate(combinations):
        name = f"fleet_load_bench_{index}"
        database = fresh_database(args.database_url, name) if args.database_url else None
        try:
            report = measure(
                args, workers=workers, turn_processes=processes, database_url=database, code=tree, submit=flow
            )
        finally:
            if args.database_url:
                drop_database(args.database_url, name)
        repeats = sum(1 for earlier in reports if earlier["topology"].split(" #")[0] == report["topology"])
        if repeats:
            report["topology"] += f" #{repeats + 1}"
        reports.append(report)
        print(json.dumps(report, indent=2))
    if len(reports) == 1:
        return 0 if reports[0]["outcomes"] == ["turn.completed"] else 1
    base = reports[0]
    print(
        json.dumps(
            {
                "compared_to": base["topology"],
                "ratios": {
                    r["topology"]: {
                        "turns_per_second": round(r["turns_per_second"] / base["turns_per_second"], 2),
                        "event_lag_p99": round(r["event_lag_p99_ms"] / base["event_lag_p99_ms"], 2)
                        if base["event_lag_p99_ms"]
                        else None,
                        "time_to_first_event_p50": round(
                            r["time_to_first_event_p50_ms"] / base["time_to_first_event_p50_ms"], 2
                        )
                        if base["time_to_first_event_p50_ms"]
                        else None,
                    }
                    for r in reports
                },
            },
            indent=2,
        )
    )
    return 0 if all(r["outcomes"] == ["turn.completed"] for r in reports) else 1


def measure(
    args: argparse.Namespace,
    *,
    workers: int | None,
    turn_processes: int | None = None,
    database_url: str | None = None,
    code: tuple[str, str] | None = None,
    submit: str = "streamed",
) -> dict[str, Any]:
    """One topology under the load: ``workers`` None or 0, the server runs turns; N, N worker processes;
    ``turn_processes``: the processes that run turns run their engines in that many turn processes;
    ``code``: (label, source tree) the processes import fleet_rlm from."""
    database_url = database_url or args.database_url

    with (
        ModelProcess(args.iterations, args.delay) as model_server,
        tempfile.TemporaryDirectory(prefix="fleet-load-") as home,
    ):
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
        env.update(
            {
                "FLEET_HOME": home,
                "FLEET_LM_MODEL": "openai/root",
                "FLEET_LM_BASE_URL": model_server.base_url,
                "FLEET_LM_API_KEY": "scripted",
                "FLEET_SUB_LM_MODEL": "openai/sub",
                "FLEET_LM_NUM_RETRIES": "0",
                "FLEET_SANDBOX_POOL_SIZE": str(args.pool),
                "FLEET_MAX_ITERATIONS": str(args.iterations + 2),
                "XDG_CONFIG_HOME": str(Path(home) / "config"),
            }
        )
        if database_url:
            env["FLEET_DATABASE_URL"] = database_url
        if args.max_running is not None:
            env["FLEET_MAX_RUNNING_TURNS"] = str(args.max_running)
        if workers:
            env["FLEET_WORKER_IN_SERVER"] = "false"
        if turn_processes is not None:
            env["FLEET_WORKER_TURN_PROCESSES"] = str(turn_processes)
        if code is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(code[1]).resolve()), env.get("PYTHONPATH")]))
        log = Path(home) / "server.log"
        server = start_process([sys.executable, "-m", "fleet_rlm.api.server", "--port", str(port)], env, log)
        worker_logs = [Path(home) / f"worker-{index}.log" for index in range(workers or 0)]
        worker_processes = [
            start_process([sys.executable, "-m", "fleet_rlm", "worker"], env, path) for path in worker_logs
        ]
        base_url = f"http://127.0.0.1:{port}"
        try:
            if not wait_healthy(base_url, server, log):
                raise RuntimeError("the server did not start")
            wait_workers(worker_logs)
            sampler = MemorySampler(server.pid)
            cpu_before = cpu_by_part(server.pid, model_server.pid)
            sampler.start()
            timings = asyncio.run(load(base_url, args.sessions, submit))
            sampler.stop()
            server_peak_kb = sampler.process_peak_kb()
            cpu = {
                part: round(after - cpu_before[part], 2)
                for part, after in cpu_by_part(server.pid, model_server.pid).items()
            }
        finally:
            for process in [server, *worker_processes]:
                process.terminate()
            for process in [server, *worker_processes]:
                process.wait(timeout=90)

    outcomes = {t.terminal for t in timings}
    start = min(t.submitted for t in timings)
    end = max(t.finished for t in timings)
    first = [t.first_event - t.submitted for t in timings]
    first_from_sent = [t.first_event - t.sent for t in timings]
    send_delays = [t.sent - t.submitted for t in timings]
    emitted = [t.first_emitted - t.submitted for t in timings]
    accepted = [t.accepted - t.submitted for t in timings]
    lags = [lag for t in timings for lag in t.lags]
    lags_by_type: dict[str, list[float]] = {}
    for t in timings:
        for kind, lag in zip(t.lag_types, t.lags, strict=True):
            lags_by_type.setdefault(kind, []).append(lag)
    warm, cold = pool_latency(args.pool_repeats)
    report = {
        "topology": (f"{code[0]}: " if code is not None else "")
        + (f"api + {workers} workers" if workers else "fleet serve (turns in the server)")
        + (f", {turn_processes} turn processes each" if turn_processes is not None else "")
        + (", POST then GET" if submit == "separate" else ""),
        "client": SUBMIT_FLOWS[submit],
        "sessions": args.sessions,
        "iterations_per_turn": args.iterations,
        "model_delay_s": args.delay,
        "server_pool_size": args.pool,
        "max_running_turns": args.max_running if args.max_running is not None else "default",
        "database": "postgresql" if database_url else "sqlite (embedded)",
        "outcomes": sorted(outcomes),
        "events": len(lags),
        "iterations_per_turn_observed": sorted({t.iterations for t in timings}),
        "turns_per_second": round(args.sessions / (end - start), 2),
        "wall_seconds": round(end - start, 2),
        "submission_p50_p99_ms": [round(percentile(accepted, share) * 1000, 1) for share in (0.5, 0.99)],
        "time_to_first_event_p50_ms": round(percentile(first, 0.5) * 1000, 1),
        "time_to_first_event_p99_ms": round(percentile(first, 0.99) * 1000, 1),
        "client_send_delay_p50_p99_ms": [round(percentile(send_delays, share) * 1000, 1) for share in (0.5, 0.99)],
        "time_to_first_event_from_sent_p50_ms": round(percentile(first_from_sent, 0.5) * 1000, 1),
        "time_to_first_event_from_sent_p99_ms": round(percentile(first_from_sent, 0.99) * 1000, 1),
        "first_event_emitted_p50_ms": round(percentile(emitted, 0.5) * 1000, 1),
        "event_lag_p50_ms": round(percentile(lags, 0.5) * 1000, 1),
        "event_lag_p99_ms": round(percentile(lags, 0.99) * 1000, 1),
        "events_by_type": {kind: len(values) for kind, values in sorted(lags_by_type.items())},
        "event_lag_p50_p99_ms_by_type": {
            kind: [round(percentile(values, 0.5) * 1000, 1), round(percentile(values, 0.99) * 1000, 1)]
            for kind, values in sorted(lags_by_type.items())
        },
        "server_cpu_seconds": cpu["server"],
        "turn_processes_cpu_seconds": cpu["turn processes"],
        "machine_busy_cpu_seconds": cpu["machine"],
        "cpu_seconds_by_part": cpu,
        "server_peak_rss_mb": round(server_peak_kb / 1024, 1),
        "server_and_sandboxes_peak_rss_mb": round(sampler.peak_tree_kb / 1024, 1),
        "pool_acquire_to_first_execution_warm_ms": round(warm * 1000, 2),
        "cold_start_to_first_execution_ms": round(cold * 1000, 2),
        "pool_speedup": round(cold / warm, 1) if warm else None,
    }
    return report


if __name__ == "__main__":
    sys.exit(main())
