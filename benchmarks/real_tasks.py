"""Answer quality on a real local model: small tasks with known answers through each route.

Run: ``uv run python benchmarks/real_tasks.py [--model large|small]
[--routes rlm,flex,direct,baseline,reference,minrlm] [--tasks name,...] [--repeats N] [--json out.json]``
(the routes ``reference`` and ``minrlm`` need ``uv sync --group bench``). Results of a run are recorded
in docs/quality.md.

Every task (``real_tasks_data.py``) generates its files from a fixed seed into a fresh workspace and
checks the answer. The routes:

- ``rlm``, ``flex``, ``direct``: a Fleet turn in that strict mode, in-process, on the real model
  server (``fleet_rlm.models.local``), in the default (isolated) sandbox;
- ``direct`` cannot see files: when a task's files are small (``INLINE_LIMIT``) their text is written
  into its task and the workspace has no files; otherwise the turn is run with the files and refused
  before any model call, which is reported as ``refused``;
- ``baseline``: plain ``dspy.RLM("task -> answer")`` with ``dspy.LocalInterpreter`` (unisolated), the
  same model, the same task text and iteration budget, run in a directory holding the same ``files/``;
- ``reference`` and ``minrlm``: the reference RLM (``rlms``, its local REPL) and ``minrlm``, likewise
  (``real_tasks_peers.py``).

An answer counts as claimed when the turn completed and did not flag it as unverified (source
``submitted``, or ``direct`` stating no number it was not given; ``extracted`` and flex's ``module``
answers are always flagged); ``wrong but claimed`` counts the claimed answers that are wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dspy

sys.path.insert(0, str(Path(__file__).resolve().parent))

from real_tasks_data import TASKS, Task
from real_tasks_peers import PEERS, PeerConfig, working_directory

from fleet_rlm.engine.turn import TurnOutcome, TurnRequest, build_turn
from fleet_rlm.models.local import SPECS, RealModelServer
from fleet_rlm.models.local.server import API_KEY
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.tree import SHARED_DIR_MODE

ROUTES = ("rlm", "flex", "direct", "baseline", *PEERS)
CLAIMED = ("submitted", "direct")  # sources that may be claimed (extracted and module answers never are)
OUTCOMES = ("submitted", "extracted", "direct", "module", "incomplete", "failed", "refused", "cancelled")


@dataclass(frozen=True)
class Limits:
    max_iterations: int
    turn_timeout: float
    execution_timeout: float
    max_model_calls: int


@dataclass
class Result:
    task: str
    route: str
    repeat: int
    outcome: str
    """How the turn ended: its answer source when completed, else its status (or ``refused``)."""
    correct: bool
    answer: str
    error: str | None
    iterations: int
    model_calls: int
    input_tokens: int
    output_tokens: int
    seconds: float
    trace: list[str] = field(default_factory=list)
    """The code the model ran and what it printed, cut short: to see where a route went wrong."""
    unverified: bool = False
    """The completed turn flagged its answer unverified."""
    parse_failures: int | None = 0
    """Runs that ended on a model reply the route could not parse; None where the route does not report it."""

    @property
    def wrong_but_claimed(self) -> bool:
        return self.outcome in CLAIMED and not self.unverified and not self.correct

    @property
    def label(self) -> str:
        return f"{self.outcome} (unverified)" if self.outcome in CLAIMED and self.unverified else self.outcome


# -- Fleet routes ------------------------------------------------------------------------------------


def run_fleet(server: RealModelServer, task: Task, route: str, root: Path, limits: Limits) -> Result:
    workspace = Workspace.create(root / "ws", mode=SHARED_DIR_MODE)
    text = task.text
    inline = task.inline_text() if route == "direct" else None
    if inline is not None:
        text = inline
    else:
        for path, body in task.files.items():
            workspace.tree.write(path, body.encode())
    settings = server.settings(
        root / "home",
        max_iterations=limits.max_iterations,
        turn_timeout=limits.turn_timeout,
        execution_timeout=limits.execution_timeout,
        max_model_calls=limits.max_model_calls,
    )
    events: list[Event] = []
    turn = build_turn(settings, TurnRequest(task=text, workspace=workspace.root, mode=route), events.append)
    started = time.monotonic()
    outcome = asyncio.run(turn.run())
    result = fleet_result(task, route, outcome, time.monotonic() - started, artifact_text(task, workspace.root))
    result.trace = [line for event in events if (line := trace_line(event))]
    return result


def trace_line(event: Event) -> str | None:
    data = event.data
    if event.type is EventType.CODE:
        return f"code: {str(data.get('code'))[:400]}"
    if event.type is EventType.OUTPUT:
        return f"output: {str(data.get('text'))[:400]}"
    if event.type is EventType.EXECUTION_FAILED:
        return f"error: {data.get('error_type')}: {str(data.get('message'))[:300]}"
    return None


def artifact_text(task: Task, root: Path) -> str | None:
    """The file the task asked to be saved, as the run left it under ``root``, if it did."""
    if task.artifact is None:
        return None
    try:
        return (root / task.artifact).read_text(errors="replace")
    except OSError:
        return None


def parse_failed(error: str | None) -> int:
    """1 when the run ended because DSPy could not parse a model reply."""
    return int("AdapterParseError" in (error or ""))


def fleet_result(task: Task, route: str, outcome: TurnOutcome, seconds: float, artifact: str | None = None) -> Result:
    usage = outcome.usage
    if outcome.status == "completed":
        kind = str(outcome.answer_source)
    elif outcome.route is None and "cannot see workspace files" in (outcome.error or ""):
        kind = "refused"
    else:
        kind = outcome.status
    answer = outcome.answer or ""
    return Result(
        task=task.name,
        route=route,
        repeat=0,
        outcome=kind,
        correct=outcome.status == "completed" and task.passes(answer, artifact),
        answer=answer,
        error=outcome.error,
        iterations=int(usage.get("iterations", 0)),
        model_calls=int(usage.get("model_calls", 0)),
        input_tokens=int(usage.get("input_tokens", 0)),
        output_tokens=int(usage.get("output_tokens", 0)),
        seconds=seconds,
        unverified=outcome.status == "completed" and outcome.unverified,
        parse_failures=parse_failed(outcome.error),
    )


# -- the dspy.RLM baseline ---------------------------------------------------------------------------


class DeadlineLM(dspy.LM):  # type: ignore[misc]
    """``dspy.LM`` that refuses calls after a deadline, so an abandoned baseline run stops soon."""

    deadline = float("inf")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return super().__call__(*args, **kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return await super().acall(*args, **kwargs)

    def _check(self) -> None:
        if time.monotonic() > self.deadline:
            raise TimeoutError("the baseline's deadline passed")


def write_files(task: Task, root: Path) -> None:
    """The task's ``files/``, and an empty ``artifacts/`` as a Fleet workspace has, in the run's directory."""
    (root / "artifacts").mkdir(exist_ok=True)
    for path, body in task.files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(body)


def run_baseline(server: RealModelServer, task: Task, root: Path, limits: Limits) -> Result:
    write_files(task, root)
    values = server.fleet_values()
    lm = DeadlineLM(
        server.model,
        api_base=server.base_url,
        api_key=API_KEY,
        temperature=values["lm_temperature"],
        max_tokens=values["lm_max_tokens"],
        num_retries=0,
        cache=False,
    )
    rlm = dspy.RLM(
        "task -> answer",
        max_iters=limits.max_iterations,
        max_llm_calls=limits.max_model_calls,
        interpreter_factory=lambda: dspy.LocalInterpreter(execution_timeout=limits.execution_timeout),
    )
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            with dspy.context(lm=lm):
                box["prediction"] = rlm(task=task.text)
        except Exception as exc:  # every failure is one line of the report
            box["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]

    started = time.monotonic()
    lm.deadline = started + limits.turn_timeout
    with working_directory(root):
        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        worker.join(limits.turn_timeout)
        seconds = time.monotonic() - started
        if worker.is_alive():
            box["error"] = f"deadline of {limits.turn_timeout:g}s exceeded"
            worker.join(limits.execution_timeout + 60)  # its next model call is refused; let it wind down
    calls = list(lm.history)
    prediction = box.get("prediction")
    answer = str(prediction.answer) if prediction is not None and "error" not in box else ""
    if answer:
        extracted = prediction.get("final_reasoning") == "Extract forced final output"
        kind = "extracted" if extracted else "submitted"
        iterations = len(prediction.trajectory) + (1 if extracted else 0)
        trace = [f"{key}: {str(step.get(key))[:400]}" for step in prediction.trajectory for key in ("code", "output")]
    else:
        # The RLM's action prompts carry the iteration number; its extract prompt and llm_query calls do not.
        trace = []
        kind, iterations = "failed", sum(1 for call in calls if "[[ ## iteration ## ]]" in str(call.get("messages")))
    return Result(
        task=task.name,
        route="baseline",
        repeat=0,
        outcome=kind,
        correct=bool(answer) and task.passes(answer, artifact_text(task, root)),
        answer=answer,
        error=box.get("error"),
        iterations=iterations,
        model_calls=len(calls),
        input_tokens=sum(int((call.get("usage") or {}).get("prompt_tokens") or 0) for call in calls),
        output_tokens=sum(int((call.get("usage") or {}).get("completion_tokens") or 0) for call in calls),
        seconds=seconds,
        trace=trace,
        parse_failures=parse_failed(box.get("error")),
    )


# -- the peers ----------------------------------------------------------------------------------------


def run_peer(server: RealModelServer, task: Task, route: str, root: Path, limits: Limits) -> Result:
    write_files(task, root)
    values = server.fleet_values()
    config = PeerConfig(
        upstream=server.base_url,
        model=server.spec.alias,  # the name llama.cpp's server serves it under (no provider prefix)
        api_key=API_KEY,
        temperature=values["lm_temperature"],
        max_tokens=values["lm_max_tokens"],
        max_iterations=limits.max_iterations,
        max_model_calls=limits.max_model_calls,
        turn_timeout=limits.turn_timeout,
        wind_down=limits.execution_timeout + 60,
    )
    run = PEERS[route](config, task.text, root)
    return Result(
        task=task.name,
        route=route,
        repeat=0,
        outcome=run.outcome,
        correct=bool(run.answer) and task.passes(run.answer, artifact_text(task, root)),
        answer=run.answer,
        error=run.error,
        iterations=run.iterations,
        model_calls=run.model_calls,
        input_tokens=run.input_tokens,
        output_tokens=run.output_tokens,
        seconds=run.seconds,
        trace=run.trace,
        # minrlm ends a run on a reply without code; the reference feeds such a reply back and counts nothing.
        parse_failures=run.parse_failures if route == "minrlm" else None,
    )


# -- the report --------------------------------------------------------------------------------------


def summary_rows(results: list[Result], routes: list[str]) -> list[dict[str, Any]]:
    rows = []
    for route in [*routes, "all"]:
        mine = [r for r in results if route in ("all", r.route)]
        if not mine:
            continue
        rows.append(
            {
                "route": route,
                "runs": len(mine),
                "correct": sum(r.correct for r in mine),
                **{kind: sum(r.outcome == kind for r in mine) for kind in OUTCOMES},
                "wrong_but_claimed": sum(r.wrong_but_claimed for r in mine),
                "parse_failures": None
                if all(r.parse_failures is None for r in mine)
                else sum(r.parse_failures or 0 for r in mine),
                "median_iterations": statistics.median(r.iterations for r in mine),
                "tokens_in": sum(r.input_tokens for r in mine),
                "tokens_out": sum(r.output_tokens for r in mine),
                "seconds": round(sum(r.seconds for r in mine), 1),
            }
        )
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = "| route | runs | accuracy | submitted | extracted | direct/module | incomplete | failed | refused "
    head += "| wrong but claimed | parse failures | median iterations | tokens in / out | wall time |"
    lines = [head, "|" + "---|" * 14]
    for row in rows:
        accuracy = f"{row['correct']}/{row['runs']} ({100 * row['correct'] / row['runs']:.0f}%)"
        lines.append(
            f"| {row['route']} | {row['runs']} | {accuracy} | {row['submitted']} | {row['extracted']} "
            f"| {row['direct'] + row['module']} | {row['incomplete']} | {row['failed'] + row['cancelled']} "
            f"| {row['refused']} | {row['wrong_but_claimed']} "
            f"| {'—' if row['parse_failures'] is None else row['parse_failures']} | {row['median_iterations']:g} "
            f"| {row['tokens_in']:,} / {row['tokens_out']:,} | {row['seconds']:.0f} s |"
        )
    return "\n".join(lines)


def per_task_table(results: list[Result], routes: list[str]) -> str:
    lines = ["| task | " + " | ".join(routes) + " |", "|" + "---|" * (len(routes) + 1)]
    for name in dict.fromkeys(r.task for r in results):
        cells = []
        for route in routes:
            mine = [r for r in results if r.task == name and r.route == route]
            marks = [f"{'ok' if r.correct else 'WRONG' if r.wrong_but_claimed else 'x'} {r.label}" for r in mine]
            cells.append(", ".join(marks) or "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe(result: Result) -> str:
    said = result.answer or result.error or ""
    mark = "ok" if result.correct else ("WRONG-CLAIMED" if result.wrong_but_claimed else "not right")
    return (
        f"{result.task:18} {result.route:8} {result.label:10} {mark:13} it={result.iterations} "
        f"calls={result.model_calls} {result.seconds:6.1f}s  {' '.join(said.split())[:120]!r}"
    )


def run_one(server: RealModelServer, task: Task, route: str, root: Path, limits: Limits) -> Result:
    try:
        if route == "baseline":
            return run_baseline(server, task, root, limits)
        if route in PEERS:
            return run_peer(server, task, route, root, limits)
        return run_fleet(server, task, route, root, limits)
    except Exception as exc:  # a fault of this script: recorded as such, and the other runs go on
        error = f"benchmark error: {type(exc).__name__}: {exc}".splitlines()[0]
        return Result(task.name, route, 0, "failed", False, "", error, 0, 0, 0, 0, 0.0)


# -- main ----------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", choices=sorted(SPECS), default="large")
    parser.add_argument("--routes", default=",".join(ROUTES))
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--max-iterations", type=int, default=8)
    parser.add_argument("--max-model-calls", type=int, default=40)
    parser.add_argument("--turn-timeout", type=float, default=300.0)
    parser.add_argument("--execution-timeout", type=float, default=120.0)
    parser.add_argument("--json", type=Path, help="write every run's result here")
    args = parser.parse_args(argv)
    for option, known in (("routes", ROUTES), ("tasks", tuple(TASKS))):
        unknown = [name for name in getattr(args, option).split(",") if name not in known]
        if unknown:
            parser.error(f"unknown --{option}: {', '.join(unknown)} (known: {', '.join(known)})")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    routes: list[str] = args.routes.split(",")
    tasks = [TASKS[name]() for name in args.tasks.split(",")]
    limits = Limits(args.max_iterations, args.turn_timeout, args.execution_timeout, args.max_model_calls)
    results: list[Result] = []
    started = time.monotonic()
    model = f"{SPECS[args.model].alias} ({args.model})"
    with tempfile.TemporaryDirectory(prefix="fleet-quality-") as tmp:
        for repeat in range(args.repeats):
            for task in tasks:
                for route in routes:
                    root = Path(tmp) / f"{task.name}-{route}-{repeat}"
                    root.mkdir()
                    # A fresh server per run: a reply abandoned at a deadline keeps a server busy until it
                    # ends, and would otherwise be paid for by the next run.
                    with RealModelServer(SPECS[args.model]) as server:
                        result = run_one(server, task, route, root, limits)
                    result.repeat = repeat
                    results.append(result)
                    print(describe(result), flush=True)
                    if args.json is not None:  # after every run, so that a run cut short keeps what it measured
                        write_json(args.json, model, limits, tasks, results, routes)
    print(f"\n{model}, {len(tasks)} tasks x {args.repeats} repeats, {time.monotonic() - started:.0f} s in all\n")
    print(markdown_table(summary_rows(results, routes)))
    print()
    print(per_task_table(results, routes))


def write_json(
    path: Path, model: str, limits: Limits, tasks: list[Task], results: list[Result], routes: list[str]
) -> None:
    payload = {
        "model": model,
        "limits": asdict(limits),
        "expected": {task.name: task.expected for task in tasks},
        "summary": summary_rows(results, routes),
        "results": [asdict(r) | {"wrong_but_claimed": r.wrong_but_claimed} for r in results],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
