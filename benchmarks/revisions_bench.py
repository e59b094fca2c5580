"""Two revisions of Fleet side by side: the load and sandbox benchmarks on each, alternating, one run.

Run: ``uv run python benchmarks/revisions_bench.py --base REV [--rounds 3] [--sessions 50]``.

The base revision is checked out into a temporary git worktree with its own environment
(``uv sync --locked``); the head is this working tree. Each round runs ``benchmarks/load_bench.py`` and
``benchmarks/sandbox_bench.py`` of each revision with that revision's own code, base and head taking
turns, so both see the same machine load. Printed: the median of every figure per revision and the
ratio head / base (for times, below 1 is faster; for turns per second, above 1 is faster).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOAD_FIGURES = (
    "turns_per_second",
    "time_to_first_event_p50_ms",
    "time_to_first_event_p99_ms",
    "event_lag_p50_ms",
    "event_lag_p99_ms",
    "server_cpu_seconds",
    "server_peak_rss_mb",
    "pool_acquire_to_first_execution_warm_ms",
    "cold_start_to_first_execution_ms",
)
SANDBOX_ROW = re.compile(r"^(?P<name>[A-Za-z0-9 ,]+?)\s+(?P<ours>[\d.]+) ms\s+[\d.]+ ms")


def run_in(tree: Path, *args: str) -> str:
    done = subprocess.run(
        ["uv", "run", "--project", str(tree), "python", *args],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def load_figures(tree: Path, sessions: int) -> dict[str, float]:
    report = json.loads(run_in(tree, "benchmarks/load_bench.py", "--sessions", str(sessions)))
    if report["outcomes"] != ["turn.completed"]:
        raise SystemExit(f"{tree}: not every turn completed: {report['outcomes']}")
    return {f"load: {name}": float(report[name]) for name in LOAD_FIGURES}


def sandbox_figures(tree: Path, repeats: int) -> dict[str, float]:
    figures = {}
    for line in run_in(tree, "benchmarks/sandbox_bench.py", "--repeats", str(repeats)).splitlines():
        match = SANDBOX_ROW.match(line)
        if match:
            figures[f"sandbox: {match['name'].strip()} (ms)"] = float(match["ours"])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--base", required=True, help="the git revision to compare against")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each benchmark per revision")
    parser.add_argument("--sessions", type=int, default=50, help="sessions of each load run")
    parser.add_argument("--sandbox-repeats", type=int, default=15, help="repeats inside each sandbox run")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="fleet-revisions-") as scratch:
        base = Path(scratch) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.base], cwd=ROOT, check=True)
        try:
            subprocess.run(["uv", "sync", "--locked", "--quiet"], cwd=base, check=True)
            samples: dict[str, dict[str, list[float]]] = {"base": defaultdict(list), "head": defaultdict(list)}
            for round_number in range(args.rounds):
                for name, tree in (("base", base), ("head", ROOT)):
                    print(f"round {round_number + 1}/{args.rounds}: {name}", file=sys.stderr)
                    figures = load_figures(tree, args.sessions) | sandbox_figures(tree, args.sandbox_repeats)
                    for figure, value in figures.items():
                        samples[name][figure].append(value)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)

    print(f"head (this tree) vs base {args.base}; medians over {args.rounds} alternating rounds")
    print(f"{'figure':<58}{'base':>12}{'head':>12}{'head/base':>11}")
    for figure in samples["base"]:
        old, new = statistics.median(samples["base"][figure]), statistics.median(samples["head"][figure])
        ratio = new / old if old else float("inf")
        print(f"{figure:<58}{old:>12.3f}{new:>12.3f}{ratio:>10.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
