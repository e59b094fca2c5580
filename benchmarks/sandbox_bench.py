"""The local sandbox (bubblewrap-isolated) side by side with ``dspy.LocalInterpreter`` (an unisolated subprocess).

Run: ``uv run python benchmarks/sandbox_bench.py [--repeats N]``. Prints medians and ratios for:

- cold start: create an interpreter and run its first execution;
- execution round trip: one trivial execution on a warm interpreter;
- tool round trip: one host-tool call from inside running code (timed inside the code);
- 50 MB input: the per-iteration cost of an execution when ``dspy.RLM`` passes a 50 MB input every time
  (median over 10 iterations), plus, for information, the first iteration, which carries the input;
- first ``import pandas`` in a started sandbox, for information (the sandbox environment's; Fleet's own
  environment, where LocalInterpreter runs, has no pandas).

Targets: cold start within 1.5x of LocalInterpreter's, execution and tool round trips no slower, and the
50 MB per-iteration overhead at least 50x lower. Measurements alternate between the two so that drift on
a busy machine hits both alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

from fleet_rlm.sandbox.base import SandboxLimits, SandboxSpec
from fleet_rlm.sandbox.local import LocalSandboxBackend

BIG_INPUT_CHARS = 50 * 1024 * 1024
BIG_INPUT_ITERATIONS = 10
TOOL_CALLS_PER_RUN = 200
TOOL_TIMING_CODE = f"""
import time as _t
_laps = []
for _ in range({TOOL_CALLS_PER_RUN}):
    _start = _t.perf_counter()
    ping()
    _laps.append(_t.perf_counter() - _start)
_laps.sort()
print(_laps[len(_laps) // 2])
"""

Interpreter = Any
Factory = Callable[[dict[str, Callable[..., Any]]], Interpreter]


@dataclass
class Row:
    name: str
    ours: float  # seconds
    theirs: float | None  # None: LocalInterpreter cannot do it
    target: str
    met: bool


def ping() -> str:
    return "pong"


def sandbox_factory(workspace: Path) -> Factory:
    backend = LocalSandboxBackend()
    limits = SandboxLimits(execution_timeout=600)

    def make(tools: dict[str, Callable[..., Any]]) -> Interpreter:
        sandbox = backend.create(SandboxSpec(workspace, limits=limits))
        sandbox.tools.update(tools)
        return sandbox

    return make


def local_interpreter_factory(tools: dict[str, Callable[..., Any]]) -> Interpreter:
    return dspy.LocalInterpreter(tools=dict(tools))


def cold_start(factory: Factory) -> float:
    interpreter = factory({})
    started = time.perf_counter()
    interpreter.execute("1")
    elapsed = time.perf_counter() - started
    interpreter.shutdown()
    return elapsed


def first_pandas_import(factory: Factory) -> float:
    interpreter = factory({})
    try:
        interpreter.execute("1")  # started, so only the import is timed
        started = time.perf_counter()
        interpreter.execute("import pandas")
        return time.perf_counter() - started
    finally:
        interpreter.shutdown()


def round_trips(interpreter: Interpreter, count: int) -> list[float]:
    laps = []
    for _ in range(count):
        started = time.perf_counter()
        interpreter.execute("x = 1")
        laps.append(time.perf_counter() - started)
    return laps


def tool_round_trip(interpreter: Interpreter) -> float:
    return float(str(interpreter.execute(TOOL_TIMING_CODE)).strip().splitlines()[-1])


def big_input_iterations(factory: Factory, big: str) -> list[float]:
    interpreter = factory({})
    interpreter.execute("1")  # started, so only the iterations are timed
    laps = []
    try:
        for _ in range(BIG_INPUT_ITERATIONS):
            started = time.perf_counter()
            interpreter.execute("n = len(context)", variables={"context": big})
            laps.append(time.perf_counter() - started)
    finally:
        interpreter.shutdown()
    return laps


def alternate(ours: Callable[[], list[float]], theirs: Callable[[], list[float]], repeats: int) -> tuple[float, float]:
    """Medians of both measures, taken in turns."""
    mine: list[float] = []
    other: list[float] = []
    for _ in range(repeats):
        mine += ours()
        other += theirs()
    return statistics.median(mine), statistics.median(other)


def run(repeats: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as scratch:
        os.chmod(scratch, 0o777)  # the sandbox runs as a uid of its own, and the host chowns nothing
        ours = sandbox_factory(Path(scratch))
        theirs = local_interpreter_factory
        for factory in (ours, theirs):  # warm the page cache and bytecode caches
            cold_start(factory)

        cold = alternate(lambda: [cold_start(ours)], lambda: [cold_start(theirs)], repeats)
        pandas_import = statistics.median(first_pandas_import(ours) for _ in range(max(1, repeats // 3)))

        sandbox, interpreter = ours({"ping": ping}), theirs({"ping": ping})
        try:
            round_trips(sandbox, 20)
            round_trips(interpreter, 20)
            trips = alternate(lambda: round_trips(sandbox, 50), lambda: round_trips(interpreter, 50), repeats)
            tools = alternate(lambda: [tool_round_trip(sandbox)], lambda: [tool_round_trip(interpreter)], repeats)
        finally:
            sandbox.shutdown()
            interpreter.shutdown()

        big = "x" * BIG_INPUT_CHARS
        big_runs: dict[str, list[list[float]]] = {"ours": [], "theirs": []}

        def record(name: str, factory: Factory) -> list[float]:
            big_runs[name].append(big_input_iterations(factory, big))
            return big_runs[name][-1]

        iterations = alternate(lambda: record("ours", ours), lambda: record("theirs", theirs), max(1, repeats // 5))
        first = (
            statistics.median(laps[0] for laps in big_runs["ours"]),
            statistics.median(laps[0] for laps in big_runs["theirs"]),
        )

    return [
        Row("cold start to first execution", *cold, "<= 1.5x", cold[0] <= 1.5 * cold[1]),
        Row("execution round trip", *trips, "<= 1.0x", trips[0] <= trips[1]),
        Row("host tool call round trip", *tools, "<= 1.0x", tools[0] <= tools[1]),
        Row("50 MB input, per iteration", *iterations, "<= 1/50x", iterations[0] * 50 <= iterations[1]),
        Row("50 MB input, first iteration", *first, "(info)", True),
        Row("first import pandas", pandas_import, None, "(info)", True),
    ]


def render(rows: list[Row], repeats: int) -> str:
    lines = [
        f"local sandbox (bubblewrap) vs dspy.LocalInterpreter; medians over {repeats} repeats",
        f"{'measure':<32}{'sandbox':>12}{'LocalInterp.':>14}{'ratio':>12}  {'target':<9}{'met':>4}",
    ]
    for row in rows:
        theirs = _ms(row.theirs) if row.theirs is not None else "n/a"
        ratio = f"{row.ours / row.theirs:>11.4g}x" if row.theirs else f"{'':>12}"
        lines.append(
            f"{row.name:<32}{_ms(row.ours):>12}{theirs:>14}{ratio}  {row.target:<9}"
            f"{('yes' if row.met else 'NO') if row.target != '(info)' else '':>4}"
        )
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=15, help="repeats per measure (the 50 MB one uses a fifth)")
    arguments = parser.parse_args()
    print(render(run(arguments.repeats), arguments.repeats))


if __name__ == "__main__":
    main()
