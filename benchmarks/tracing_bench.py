"""What tracing costs per iteration: the same turns with tracing off, exported over OTLP, and to MLflow.

Run: ``uv run python benchmarks/tracing_bench.py [--iterations 20] [--rounds 3]`` (needs the extra:
``uv sync --extra tracing``). Uses the scripted model (instant replies) through the service on SQLite,
so what is measured is Fleet's own time per iteration: a model round trip over loopback, running the
code in a real sandbox, storing and publishing the events, and (when on) building the span tree.

- end to end: a turn of ``--iterations`` iterations, per configuration, the configurations taking
  turns in each round; seconds per iteration, median over rounds, and the ratio to tracing off;
- the tracer alone: one turn's events replayed through the span builder (OTLP exporter to a local
  receiver, MLflow to a local store) many times, until its tracing thread has built every span;
  microseconds per iteration. The event loop only hands events over; this work runs on each
  backend's tracing thread (MLflow's includes its store's writes), and OTLP's export on the SDK's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.tracing import TurnTracer, tracer_from_settings
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.testing.otlp import OtlpReceiver
from fleet_rlm.testing.settings import scripted_settings

CONFIGS = ("off", "otlp", "mlflow")


def script(server: ScriptedModelServer, iterations: int) -> None:
    steps = [rlm_step(f"Step {i}.", f"x = {i} * 2\nprint(x)") for i in range(1, iterations)]
    server.script("root", *steps, rlm_step("Done.", "SUBMIT(answer=str(x))"))


async def one_turn(settings: Any, iterations: int) -> tuple[float, list[Event]]:
    fleet = FleetService(settings)
    await fleet.start()
    try:
        await fleet.sessions.create(name="bench")
        started = time.perf_counter()
        turn, _ = await fleet.turns.submit("bench", TurnSubmission(message="count", max_iterations=iterations + 1))
        done = await fleet.turns.wait(turn.id)
        elapsed = time.perf_counter() - started
        if done.status != "completed" or done.usage.get("iterations") != iterations:
            raise SystemExit(f"benchmark turn {done.status} after {done.usage.get('iterations')}: {done.error}")
        events = await fleet.parts.store.events_after(turn.id)
        return elapsed / iterations, events
    finally:
        await fleet.stop()


def replay_cost(tracer: TurnTracer, events: list[Event], repeats: int) -> float:
    """Microseconds of span building per iteration, the turn's events replayed ``repeats`` times."""
    iterations = sum(1 for e in events if e.type is EventType.ITERATION_STARTED)
    started = time.perf_counter()
    for _ in range(repeats):
        observers: list[Callable[[Event], None]] = list(tracer.observers("s_bench"))
        for event in events:
            for observe in observers:
                observe(event)
    tracer.drain()
    return (time.perf_counter() - started) / (repeats * iterations) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10, help="replays of one turn's events for the tracer alone")
    args = parser.parse_args()
    per_iteration: dict[str, list[float]] = {config: [] for config in CONFIGS}
    with ScriptedModelServer() as server, OtlpReceiver() as receiver, tempfile.TemporaryDirectory() as tmp:
        events: list[Event] = []
        for round_ in range(args.rounds):
            for config in CONFIGS:
                home = Path(tmp) / f"{config}-{round_}"
                home.mkdir()
                extra: dict[str, Any] = {
                    "off": {},
                    "otlp": {"otel_exporter_otlp_endpoint": receiver.endpoint},
                    "mlflow": {"trace_turns": True},
                }[config]
                settings = scripted_settings(server, home, sandbox_pool_size=1, max_model_calls=500, **extra)
                script(server, args.iterations)
                seconds, events = asyncio.run(one_turn(settings, args.iterations))
                per_iteration[config].append(seconds)
        print(f"end to end, {args.iterations} iterations per turn, median of {args.rounds} rounds:")
        off = statistics.median(per_iteration["off"])
        for config in CONFIGS:
            median = statistics.median(per_iteration[config])
            print(f"  {config:<7} {median * 1000:8.1f} ms per iteration   ×{median / off:.3f}")
        print(f"the tracer alone, one turn's events replayed {args.repeats} times:")
        both = scripted_settings(
            server,
            Path(tmp) / "replay",
            otel_exporter_otlp_endpoint=receiver.endpoint,
            trace_turns=True,
        )
        (Path(tmp) / "replay").mkdir()
        tracer = tracer_from_settings(both)
        assert tracer is not None
        for backend in tracer.backends:
            alone = TurnTracer(backend, model=both.lm.model)
            print(f"  {type(backend).__name__:<13} {replay_cost(alone, events, args.repeats):8.1f} µs per iteration")
        tracer.shutdown()


if __name__ == "__main__":
    main()
