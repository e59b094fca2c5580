"""Session kernels: a second question on a large dataframe, with the kernel kept and without.

Run: ``uv run python benchmarks/kernel_bench.py [--csv-mb 500] [--repeats 3] [--idle-kernels 20]``.

Two real servers (``python -m fleet_rlm.api.server``, SQLite under a temporary FLEET_HOME) against
the scripted model, which answers at once: one with session kernels (the default settings), one with
``sandbox.max_kernels = 0`` (every turn on a fresh sandbox, as before kernels). On each, a session
uploads a CSV of ``--csv-mb`` MB; turn 1 loads it with pandas. Then turn 2 asks a question of the
data: on the kernel server it uses the dataframe turn 1 left; without kernels it must load the file
again. Reported: time from submitting turn 2 to its answer (median of ``--repeats`` second turns),
and the ratio without / with kernels. Each second turn is sent once the last turn's snapshot is
taken (as when a person reads an answer before asking again).

Then ``--idle-kernels`` sessions each run one small turn on the kernel server and stay idle: the
server's ``/health`` reports their resident memory (the RSS of every kernel's processes).
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.sse import event_frames

LOAD = "import pandas as pd\ndf = pd.read_csv('files/big.csv')\nSUBMIT(answer=str(len(df)))"
QUESTION = "SUBMIT(answer=str(df.groupby('region')['revenue'].sum().idxmax()))"
SMALL = "import json\nnotes = {'turn': 1}\nSUBMIT(answer='ok')"


def write_csv(path: Path, megabytes: int) -> int:
    """A CSV of about ``megabytes`` MB: day, region, units, revenue (numeric but for the region)."""
    rng = random.Random(7)
    regions = ["north", "south", "east", "west"]
    target = megabytes * 1024 * 1024
    rows = 0
    with path.open("w") as out:
        out.write("day,region,units,revenue\n")
        while out.tell() < target:
            lines = [
                f"{rng.randrange(1, 366)},{regions[rng.randrange(4)]},{rng.randrange(1, 500)},{rng.random() * 1000:.2f}\n"
                for _ in range(100_000)
            ]
            out.write("".join(lines))
            rows += len(lines)
    return rows


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    def __init__(self, model: ScriptedModelServer, home: Path, **settings: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/api/v1"
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
        env.update(
            {
                "FLEET_HOME": str(home),
                "FLEET_LM_MODEL": "openai/root",
                "FLEET_LM_BASE_URL": model.base_url,
                "FLEET_LM_API_KEY": "scripted",
                "FLEET_SUB_LM_MODEL": "openai/sub",
                "FLEET_MODE": "rlm",
                "FLEET_UPLOAD_LIMIT_MB": "4096",
                "FLEET_SANDBOX_MEMORY_MB": "6144",
                "FLEET_EXECUTION_TIMEOUT": "600",
                "FLEET_TURN_TIMEOUT": "1800",
                "XDG_CONFIG_HOME": str(home / "config"),
            }
        )
        env.update({f"FLEET_{name.upper()}": value for name, value in settings.items()})
        self.log = (home / "server.log").open("ab")
        command = [sys.executable, "-m", "fleet_rlm.api.server", "--host", "127.0.0.1", "--port", str(self.port)]
        self.process = subprocess.Popen(command, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("the server did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()


def run_turn(http: httpx.Client, session: str, message: str) -> tuple[float, dict[str, Any]]:
    """Seconds from submitting the turn to its terminal event, and the stored turn."""
    started = time.perf_counter()
    turn_id = http.post(f"/sessions/{session}/turns", json={"message": message}).json()["id"]
    with http.stream("GET", f"/turns/{turn_id}/events") as stream:
        for frame in event_frames(stream):
            if frame.event.startswith("turn.") and frame.event != "turn.started":
                break
    elapsed = time.perf_counter() - started
    return elapsed, http.get(f"/turns/{turn_id}").json()


def second_turns(
    server: Server, model: ScriptedModelServer, csv: Path, repeats: int, *, kernel: bool
) -> tuple[float, list[float]]:
    """Turn 1's time (loading the CSV) and each second turn's time on a session of ``server``."""
    with httpx.Client(base_url=server.url, timeout=1800) as http:
        http.post("/sessions", json={"name": "big"})
        with csv.open("rb") as handle:
            uploaded = http.post("/sessions/big/files", files={"file": ("big.csv", handle, "text/csv")})
        uploaded.raise_for_status()
        model.script("root", rlm_step("Load.", LOAD))
        first, turn = run_turn(http, "big", "load the data")
        assert turn["status"] == "completed", turn
        times = []
        for _ in range(repeats):
            # A person reads the answer before asking again: the last turn's snapshot is taken by then
            # (this waits for it; a turn sent at once waits for it too). Without kernels, a no-op.
            http.get("/sessions/big/kernel").raise_for_status()
            model.script(
                "root", rlm_step("Answer.", QUESTION if kernel else f"{LOAD.rsplit(chr(10), 1)[0]}\n{QUESTION}")
            )
            elapsed, turn = run_turn(http, "big", "which region earns most?")
            assert turn["status"] == "completed", turn
            times.append(elapsed)
        if kernel:
            status = http.get("/sessions/big/kernel").json()
            lost = (status.get("snapshot") or {}).get("lost", [])
            print(f"  kernel after the turns: memory {status['memory_bytes'] / 2**20:.0f} MiB; not snapshotted: {lost}")
    return first, times


def idle_kernels(server: Server, model: ScriptedModelServer, count: int) -> dict[str, int]:
    with httpx.Client(base_url=server.url, timeout=300) as http:
        before = http.get("/health").json()["kernels"]
        for index in range(count):
            http.post("/sessions", json={"name": f"idle-{index}"})
            model.script("root", rlm_step("Note.", SMALL))
            _, turn = run_turn(http, f"idle-{index}", "note something")
            assert turn["status"] == "completed", turn
        for index in range(count):  # waits for each kernel's snapshot
            http.get(f"/sessions/idle-{index}/kernel").raise_for_status()
        return {"before": before["live"], **http.get("/health").json()["kernels"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv-mb", type=int, default=500, help="size of the CSV (MB)")
    parser.add_argument("--repeats", type=int, default=3, help="second turns measured per server")
    parser.add_argument("--idle-kernels", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleet-kernel-bench-") as tmp, ScriptedModelServer() as model:
        root = Path(tmp)
        csv = root / "big.csv"
        started = time.perf_counter()
        rows = write_csv(csv, args.csv_mb)
        size = csv.stat().st_size
        print(f"CSV: {size / 2**20:.0f} MiB, {rows:,} rows (written in {time.perf_counter() - started:.1f}s)")
        results: dict[str, tuple[float, list[float]]] = {}
        for name, kernel, settings in (
            ("without kernels (max_kernels=0)", False, {"sandbox_max_kernels": "0"}),
            ("with kernels", True, {"sandbox_max_kernels": str(max(8, args.idle_kernels + 1))}),
        ):
            home = root / name.split()[0]
            home.mkdir()
            server = Server(model, home, **settings)
            try:
                print(f"{name}:")
                if kernel:  # first, so that the big session's kernel is not counted among them
                    memory = idle_kernels(server, model, args.idle_kernels)
                results[name] = second_turns(server, model, csv, args.repeats, kernel=kernel)
            finally:
                server.stop()
        print()
        print("| | turn 1 (load) | turn 2, median (range) |")
        print("|---|---|---|")
        for name, (first, times) in results.items():
            print(f"| {name} | {first:.2f} s | {statistics.median(times):.3f} s ({min(times):.3f}–{max(times):.3f}) |")
        baseline = statistics.median(results["without kernels (max_kernels=0)"][1])
        kept = statistics.median(results["with kernels"][1])
        print(f"\nturn 2 time, without / with kernels: {baseline / kept:.1f}x")
        per = memory["memory_bytes"] / max(1, memory["live"])
        print(
            f"idle kernels: {memory['live']} live (none before), {memory['memory_bytes'] / 2**20:.0f} MiB resident "
            f"in all, {per / 2**20:.1f} MiB each on average"
        )


if __name__ == "__main__":
    main()
