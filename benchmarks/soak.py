"""Soak: many turns against one real ``fleet serve`` on SQLite, checking that nothing leaks or grows.

Run: ``uv run python benchmarks/soak.py [--turns 1000] [--lanes 2] [--delay 0.01] [--checkpoint 100]
[--warmup 100] [--crash-every 50]``.

A scripted model (``fleet_rlm.models.scripted``) answers after ``--delay`` seconds. Turns cycle through
every route: ``direct``; ``hybrid`` whose triage picks direct, rlm or flex; ``flex``; ``rlm`` over one
to three iterations (a sub-model call, an artifact, an execution error); a parent that spawns a child
agent; a cancel while the code runs. Every ``--crash-every``-th turn the code kills its own sandbox
worker (``import os; os._exit(3)``): those turns are deliberate and may end ``failed`` or, where the
engine restarts a dead worker, ``completed``; the report says which. ``--lanes`` sessions run turns at
once; each session takes ``--session-turns`` turns, so its history grows, then a new one starts. The
server keeps at most ``--max-kernels`` session kernels (default ``--lanes``): as many are live after
warm-up as at the end, so a kernel kept on purpose is not counted as a leak.

Every ``--checkpoint`` turns the run waits for the server to be idle (its sandbox pool refilled) and
reads it from outside. Checked, with the exit status 1 when any check fails:

- no failed, interrupted or stuck turn besides the deliberate crashes, and every cancel ended cancelled;
- no leak: the server's file descriptors, descendant processes, sandbox processes, sandbox cgroups,
  sandbox /tmp mounts and scratch entries (data dir ``sandboxes``, ``children``, ``runs``,
  ``workspaces``, ``tmp``, and the server's private TMPDIR) at the end are what they were after warm-up
  (file descriptors within ``--fd-slack``); after a graceful shutdown none of them is left at all.
  Connections to the model endpoint are counted apart: the model client keeps idle keep-alive
  connections, as many as turns ran at once, and checked to stay under ``--model-connections`` (a
  connection leaked per turn, or per ten, would pass it);
- server RSS at the end at most ``--rss-growth`` (10%) above its value after warm-up;
- the database grows linearly in events: the bytes per event added since warm-up, at every later
  checkpoint, stay within ``--db-band`` (±15%) of their median.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from soak_probes import Reading, Server, leftovers_after_exit, settled

from fleet_rlm.models.scripted import ScriptedModel, ScriptedModelServer, fields_reply, rlm_step, task_of
from fleet_rlm.testing.sse import aevent_frames

TERMINAL = ("turn.completed", "turn.incomplete", "turn.failed", "turn.cancelled", "turn.interrupted")
STEP = "# soak step"
CANCEL_MARK = "soak turn is running"
CRASH = "crash"
# One kind per turn, by the turn's number modulo 10 (crashes replace every --crash-every-th).
CYCLE = ("rlm", "direct", "hybrid-direct", "children", "flex", "cancel", "hybrid-rlm", "rlm-steps", "hybrid-flex")
CYCLE += ("rlm-error",)
MODES = {"direct": "direct", "flex": "flex", "hybrid-direct": "hybrid", "hybrid-rlm": "hybrid", "hybrid-flex": "hybrid"}
EXPECTED = {"cancel": {"turn.cancelled"}, CRASH: {"turn.failed", "turn.completed"}}
KIND = re.compile(r"\[kind=([\w-]+)\]")

# The code the root model writes, per kind, one entry per iteration.
RLM_SCRIPTS: dict[str, list[str]] = {
    "rlm": ["x = llm_query('one word please')\nSUBMIT(answer='ok: ' + x)"],
    "hybrid-rlm": ["SUBMIT(answer='routed to rlm')"],
    "rlm-steps": [
        "rows = [i * i for i in range(1000)]\nprint(sum(rows))",
        "open('artifacts/soak.txt', 'w').write('soak ' * 200)\nprint('saved')",
        "SUBMIT(answer='saved artifacts/soak.txt')",
    ],
    "rlm-error": ["1 / 0", "SUBMIT(answer='recovered')"],
    "children": ["result = spawn_agent('soak child [kind=child]')\nSUBMIT(answer='child: ' + str(result['status']))"],
    "child": ["SUBMIT(answer='child done')"],
    "cancel": [f"print({CANCEL_MARK!r}, flush=True)\nimport time\ntime.sleep(120)"],
    CRASH: ["import os\nos._exit(3)", "SUBMIT(answer='answered after the sandbox restarted')"],
}


def kind_of(number: int, crash_every: int) -> str:
    if crash_every and number % crash_every == 0:
        return CRASH
    return CYCLE[number % len(CYCLE)]


def _kind_in(text: str | None) -> str:
    match = KIND.search(text or "")
    return match[1] if match else "rlm"


def responder(delay: float) -> Any:
    """Answers every request from what it asks: triage, a sub-model query, an RLM iteration, or a
    direct or flex prediction."""

    def answer(request: dict[str, Any]) -> str:
        time.sleep(delay)
        messages = request.get("messages") or [{}]
        last = str(messages[-1].get("content", ""))
        if request.get("model") == "sub":
            if "[[ ## route ## ]]" in last:
                route = _kind_in(last).removeprefix("hybrid-")
                return fields_reply(route=route if route in ("direct", "rlm", "flex") else "rlm", reason="Scripted.")
            return "soak"
        if "[[ ## code ## ]]" not in last:
            return fields_reply(reasoning="Scripted.", answer="A scripted answer.")
        script = RLM_SCRIPTS[_kind_in(task_of(request))]
        # Earlier iterations are the model's own messages (Fleet sends the trajectory as a conversation).
        done = sum(str(message.get("content", "")).count(STEP) for message in messages)
        return rlm_step(f"Step {done + 1}.", f"{STEP}\n{script[min(done, len(script) - 1)]}")

    return answer


@dataclass
class TurnResult:
    number: int
    kind: str
    terminal: str = "stuck"
    events: int = 0
    restarted: bool = False
    seconds: float = 0.0
    error: str | None = None


@dataclass
class Lane:
    index: int
    session_id: str = ""
    session_turns: int = 0
    sessions: int = 0


@dataclass
class Run:
    results: list[TurnResult] = field(default_factory=list)
    readings: list[Reading] = field(default_factory=list)
    lanes: list[Lane] = field(default_factory=list)


async def run_turn(client: httpx.AsyncClient, lane: Lane, number: int, kind: str, timeout: float) -> TurnResult:
    result = TurnResult(number, kind)
    started = time.monotonic()
    body = {"message": f"soak turn {number} [kind={kind}]", "mode": MODES.get(kind, "rlm")}
    accepted = await client.post(f"/sessions/{lane.session_id}/turns", json=body)
    accepted.raise_for_status()
    turn_id = accepted.json()["id"]
    try:
        async with asyncio.timeout(timeout):
            async with client.stream("GET", f"/turns/{turn_id}/events", timeout=httpx.Timeout(30, read=None)) as stream:
                async for frame in aevent_frames(stream):
                    event = json.loads(frame.data)
                    result.events += 1
                    result.restarted = result.restarted or event["type"] == "sandbox.restarted"
                    if event["type"] == "output" and CANCEL_MARK in str(event["data"].get("text")):
                        (await client.post(f"/turns/{turn_id}/cancel")).raise_for_status()
                    if event["type"] in TERMINAL:
                        result.terminal = event["type"]
                        result.error = event["data"].get("reason")
                        break
    except TimeoutError:
        await client.post(f"/turns/{turn_id}/cancel")
    result.seconds = time.monotonic() - started
    return result


async def run_lane(
    client: httpx.AsyncClient, lane: Lane, numbers: asyncio.Queue[int], args: argparse.Namespace, run: Run
) -> None:
    while not numbers.empty():
        number = numbers.get_nowait()
        if not lane.session_id or lane.session_turns >= args.session_turns:
            created = await client.post("/sessions", json={"name": f"soak-{lane.index}-{lane.sessions}"})
            created.raise_for_status()
            lane.session_id, lane.session_turns = created.json()["id"], 0
            lane.sessions += 1
        lane.session_turns += 1
        run.results.append(await run_turn(client, lane, number, kind_of(number, args.crash_every), args.turn_timeout))


async def run_batch(base_url: str, first: int, last: int, args: argparse.Namespace, run: Run) -> None:
    numbers: asyncio.Queue[int] = asyncio.Queue()
    for number in range(first, last + 1):
        numbers.put_nowait(number)
    # A client per batch, closed before the server is read, so open connections are not counted as leaks.
    async with httpx.AsyncClient(base_url=base_url + "/api/v1", timeout=60) as client:
        await asyncio.gather(*(run_lane(client, lane, numbers, args, run) for lane in run.lanes))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(
    home: Path, tmpdir: Path, model_url: str, args: argparse.Namespace
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    env.update(
        {
            "FLEET_HOME": str(home),
            "FLEET_LM_MODEL": "openai/root",
            "FLEET_LM_BASE_URL": model_url,
            "FLEET_LM_API_KEY": "scripted",
            "FLEET_SUB_LM_MODEL": "openai/sub",
            "FLEET_LM_NUM_RETRIES": "0",
            "FLEET_SANDBOX_POOL_SIZE": str(args.pool),
            "FLEET_SANDBOX_MAX_KERNELS": str(args.max_kernels if args.max_kernels is not None else args.lanes),
            "XDG_CONFIG_HOME": str(home / "config"),
            "TMPDIR": str(tmpdir),
        }
    )
    log = (home / "server.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "fleet_rlm", "serve", "--port", str(port)],
        env=env,
        cwd=home,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and server.poll() is None:
        try:
            if httpx.get(base_url + "/api/v1/health", timeout=1).status_code == 200:
                return server, base_url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    server.kill()
    raise SystemExit(f"fleet serve did not start:\n{(home / 'server.log').read_text()[-3000:]}")


def stop_server(server: subprocess.Popen[bytes]) -> int:
    server.send_signal(signal.SIGTERM)
    try:
        return server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        return server.wait()


def checks(
    run: Run, warm: Reading, end: Reading, leftovers: dict[str, list[str]], args: argparse.Namespace
) -> dict[str, Any]:
    """Each check: whether it held, and the figures it is about."""
    unexpected = [r for r in run.results if r.terminal not in EXPECTED.get(r.kind, {"turn.completed"})]
    later = [r for r in run.readings if r.turns > warm.turns and r.events > warm.events]
    # Bytes each event added since warm-up: the schema and first pages are a fixed cost, not per event.
    marginal = [(r.db_bytes - warm.db_bytes) / (r.events - warm.events) for r in later]
    spread = max((abs(value / statistics.median(marginal) - 1) for value in marginal), default=0.0)
    rss_growth = end.rss_bytes / warm.rss_bytes - 1
    max_model_connections = max(r.model_connections for r in run.readings)
    leaks = {
        name: (getattr(warm, name), getattr(end, name))
        for name in ("descendants", "sandbox_processes", "cgroups", "tmp_mounts", "scratch_entries")
        if getattr(end, name) > getattr(warm, name)
    }
    return {
        "no unexpected turn outcome": {
            "ok": not unexpected,
            "unexpected": [f"turn {r.number} ({r.kind}): {r.terminal} {r.error or ''}".strip() for r in unexpected][
                :20
            ],
        },
        "no leaked process, cgroup, /tmp mount or scratch entry (end vs warm-up)": {"ok": not leaks, "grew": leaks},
        "no leaked file descriptor (end vs warm-up)": {
            "ok": end.fds <= warm.fds + args.fd_slack,
            "warm": warm.fds,
            "end": end.fds,
            "slack": args.fd_slack,
        },
        "model connections bounded by the client's pool, not by turns": {
            "ok": max_model_connections <= args.model_connections,
            "per_checkpoint": [r.model_connections for r in run.readings],
            "limit": args.model_connections,
        },
        "nothing left after shutdown": {"ok": not any(leftovers.values()), "left": leftovers},
        "server RSS growth after warm-up": {
            "ok": rss_growth <= args.rss_growth,
            "warm_mb": round(warm.rss_bytes / 2**20, 1),
            "end_mb": round(end.rss_bytes / 2**20, 1),
            "growth_pct": round(rss_growth * 100, 1),
            "limit_pct": round(args.rss_growth * 100, 1),
        },
        "database size linear in events": {
            "ok": spread <= args.db_band,
            "bytes_per_event_since_warm_up": [round(value) for value in marginal],
            "bytes_per_event_overall": [round(r.db_bytes / r.events) for r in run.readings if r.events],
            "max_deviation_pct": round(spread * 100, 1),
            "band_pct": round(args.db_band * 100, 1),
        },
    }


def summary(run: Run, wall: float) -> dict[str, Any]:
    outcomes = Counter(f"{r.kind}: {r.terminal.removeprefix('turn.')}" for r in run.results)
    crashes = [r for r in run.results if r.kind == CRASH]
    seconds = sorted(r.seconds for r in run.results)
    return {
        "turns": len(run.results),
        "sessions": sum(lane.sessions for lane in run.lanes),
        "wall_seconds": round(wall, 1),
        "turns_per_second": round(len(run.results) / wall, 2),
        "turn_seconds_p50": round(statistics.median(seconds), 3),
        "turn_seconds_max": round(seconds[-1], 3),
        "events": sum(r.events for r in run.results),
        "outcomes": dict(sorted(outcomes.items())),
        "crash_turns": {
            "count": len(crashes),
            "ended_failed": sum(r.terminal == "turn.failed" for r in crashes),
            "completed_after_restart": sum(r.terminal == "turn.completed" and r.restarted for r in crashes),
            "completed_without_restart_event": sum(r.terminal == "turn.completed" and not r.restarted for r in crashes),
            "failure_reasons": sorted({r.error or "" for r in crashes if r.terminal == "turn.failed"}),
        },
    }


def soak(args: argparse.Namespace) -> int:
    run = Run(lanes=[Lane(index) for index in range(args.lanes)])
    model = ScriptedModel(default=responder(args.delay))
    with ScriptedModelServer(model) as model_server, tempfile.TemporaryDirectory(prefix="soak-") as root:
        home, tmpdir = Path(root) / "home", Path(root) / "server-tmp"
        home.mkdir()
        tmpdir.mkdir()
        process, base_url = start_server(home, tmpdir, model_server.base_url, args)
        server = Server(process.pid, home, tmpdir, int(model_server.base_url.rsplit(":", 1)[1].split("/")[0]))
        started = time.monotonic()
        try:
            done = 0
            while done < args.turns:
                last = min(args.turns, done + args.checkpoint)
                asyncio.run(run_batch(base_url, done + 1, last, args, run))
                done = last
                reading = settled(server, done)
                run.readings.append(reading)
                print(json.dumps({"checkpoint": reading.as_dict()}), file=sys.stderr, flush=True)
            wall = time.monotonic() - started
        finally:
            exit_status = stop_server(process)
        leftovers = leftovers_after_exit(server)
        if exit_status not in (0, -signal.SIGTERM):  # uvicorn re-raises the signal after a graceful shutdown
            leftovers["server_exit_status"] = [str(exit_status)]
    warm = next((r for r in run.readings if r.turns >= args.warmup), run.readings[0])
    end = run.readings[-1]
    verdicts = checks(run, warm, end, leftovers, args)
    report = {
        "command": " ".join(["uv run python benchmarks/soak.py", *sys.argv[1:]]),
        "settings": {k: v for k, v in vars(args).items()},
        **summary(run, wall),
        "warm_up_reading": warm.as_dict(),
        "end_reading": end.as_dict(),
        "checkpoints": [reading.as_dict() for reading in run.readings],
        "checks": verdicts,
    }
    print(json.dumps(report, indent=2))
    failed = [name for name, verdict in verdicts.items() if not verdict["ok"]]
    for name in failed:
        print(f"soak: check failed: {name}", file=sys.stderr)
    return 1 if failed else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--lanes", type=int, default=2, help="sessions running turns at once")
    parser.add_argument("--session-turns", type=int, default=10, help="turns per session before a new one")
    parser.add_argument("--delay", type=float, default=0.01, help="seconds the scripted model takes per answer")
    parser.add_argument("--checkpoint", type=int, default=100, help="turns between readings of the server")
    parser.add_argument("--warmup", type=int, default=100, help="turns before the baseline reading")
    parser.add_argument("--crash-every", type=int, default=50, help="every Nth turn kills its sandbox worker (0: none)")
    parser.add_argument("--pool", type=int, default=2, help="FLEET_SANDBOX_POOL_SIZE of the server")
    parser.add_argument(
        "--max-kernels",
        type=int,
        default=None,
        help="FLEET_SANDBOX_MAX_KERNELS of the server (default: --lanes, so the session kernels live at the "
        "baseline and at the end are as many, and a kernel kept on purpose is not counted as a leak)",
    )
    parser.add_argument("--turn-timeout", type=float, default=120.0, help="seconds before a turn counts as stuck")
    parser.add_argument("--fd-slack", type=int, default=2, help="file descriptors the end may hold above warm-up")
    parser.add_argument(
        "--model-connections", type=int, default=40, help="most idle connections to the model at a checkpoint"
    )
    parser.add_argument("--rss-growth", type=float, default=0.10, help="largest RSS growth after warm-up (share)")
    parser.add_argument(
        "--db-band", type=float, default=0.15, help="bytes per event: largest deviation from the median"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(soak(parse_args()))
