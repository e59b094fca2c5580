"""The cost of child agents: spawn overhead, and 8 children in parallel against 8 in sequence.

Run: ``uv run python benchmarks/delegation_bench.py [--children N]``. Uses the built-in scripted
model (instant replies), so what is measured is Fleet's own overhead: sandbox start, file copy,
RLM set-up, one model round trip over loopback, teardown and artifact promotion.

- spawn overhead: each child's duration (``child.finished`` minus its start) when children run one
  at a time and do nothing but submit; p50 and p99;
- parallel vs sequential: 8 children that each spend 0.5 s in sandbox code, through
  ``spawn_agents`` (concurrency 4 and 8) against a loop of ``spawn_agent``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from fleet_rlm.engine.turn import TurnRequest, build_turn
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.testing.settings import scripted_settings

WORK_SECONDS = 0.5


def run_turn(server: ScriptedModelServer, home: Path, task: str, **overrides: object) -> tuple[float, list[Event]]:
    events: list[Event] = []
    workspace = home / "ws" / str(time.monotonic_ns())
    (workspace / "files").mkdir(parents=True)
    (workspace / "files" / "input.txt").write_text("some input for the child\n" * 100)
    settings = scripted_settings(server, home, max_model_calls=500, max_children_per_turn=200, **overrides)
    turn = build_turn(settings, TurnRequest(task=task, workspace=workspace), events.append)
    started = time.perf_counter()
    outcome = asyncio.run(turn.run())
    elapsed = time.perf_counter() - started
    if outcome.status != "completed":
        raise SystemExit(f"benchmark turn {outcome.status}: {outcome.error}")
    return elapsed, events


def child_durations(events: list[Event]) -> list[float]:
    return [float(e.data["duration"]) for e in events if e.type is EventType.CHILD_FINISHED]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=40, help="children for the overhead percentiles")
    args = parser.parse_args()
    with ScriptedModelServer() as server, tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        home = Path(tmp)
        n = args.children
        loop = f"for i in range({n}):\n    spawn_agent(f'overhead child {{i}}', files=['files/input.txt'])\nSUBMIT(answer='ok')"
        server.script_for_task("root", "OVERHEAD", rlm_step("Spawn one by one.", loop))
        for i in range(n):
            server.script_for_task("root", f"overhead child {i}", rlm_step("Done.", "SUBMIT(answer='x')"))
        _, events = run_turn(server, home, "OVERHEAD", execution_timeout=600.0)
        durations = child_durations(events)

        work = f"import time\ntime.sleep({WORK_SECONDS})\nSUBMIT(answer='x')"
        timings: dict[str, float] = {}
        for label, concurrency, code in (
            ("sequential", 1, "for i in range(8):\n    spawn_agent(f'{tag} child {i}')\nSUBMIT(answer='ok')"),
            ("parallel x4", 4, "spawn_agents([{'task': f'{tag} child {i}'} for i in range(8)])\nSUBMIT(answer='ok')"),
            ("parallel x8", 8, "spawn_agents([{'task': f'{tag} child {i}'} for i in range(8)])\nSUBMIT(answer='ok')"),
        ):
            tag = label.replace(" ", "")
            server.script_for_task("root", f"RUN {tag}", rlm_step("Go.", code.replace("{tag}", tag)))
            for i in range(8):
                server.script_for_task("root", f"{tag} child {i}", rlm_step("Work.", work))
            _, events = run_turn(server, home, f"RUN {tag}", max_concurrent_children=concurrency)
            starts = [e.ts for e in events if e.type is EventType.CHILD_STARTED]
            ends = [e.ts for e in events if e.type is EventType.CHILD_FINISHED]
            timings[label] = max(ends) - min(starts)

    print(f"spawn overhead over {len(durations)} children (model time ~0, code time ~0):")
    print(f"  p50 {statistics.median(durations) * 1000:7.1f} ms   p99 {percentile(durations, 0.99) * 1000:7.1f} ms")
    print(f"\n8 children each doing {WORK_SECONDS}s of work (wall time from first start to last finish):")
    base = timings["sequential"]
    for label, seconds in timings.items():
        print(f"  {label:<12} {seconds:6.2f} s   speed-up x{base / seconds:4.1f}")


if __name__ == "__main__":
    main()
