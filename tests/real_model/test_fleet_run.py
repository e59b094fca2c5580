"""``fleet run`` against a real local model: the turn ends within its budget and keeps the event contract.

The small model answers a direct question but often does not follow DSPy's RLM format: it repeats the
instructions instead of writing code (a reply that does not parse, which the turn goes on from) or runs
into its deadline writing on; the large model writes code for the sandbox. Each turn's outcome, time,
speed and answer are listed in the run's summary.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleet_rlm.engine.numbers import numbers_in
from fleet_rlm.models.local import RealModelServer
from fleet_rlm.models.local.speed import Speed
from fleet_rlm.testing.cli import json_events, run_fleet
from fleet_rlm.testing.turn_events import event_problems

from .conftest import TurnRecord

pytestmark = pytest.mark.real_model

DIRECT_TIMEOUT = 120
# The large model's turns get twice the time their model calls take at the pace measured on this machine
# (a quiet machine reads ~95 tokens/s and writes ~20, the slowest CI run seen 17 and 6), within these bounds.
RLM_TIMEOUT = 300
MAX_RLM_TIMEOUT = 840
# The small model may ramble for its whole answer instead of writing code: keep its turn short.
SMALL_RLM_TIMEOUT = 120
SMALL_MAX_TOKENS = 512
REVENUE = [120, 75, 310, 42, 98, 205, 61, 134]
CSV_TASK = "What is the total of the revenue column in files/sales.csv? Answer with the number."
Events = list[dict[str, object]]


def run_turn(
    server: RealModelServer,
    tmp_path: Path,
    args: list[str],
    timeout: int,
    max_tokens: int = 1024,
    settings: dict[str, str] | None = None,
) -> tuple[Events, TurnRecord]:
    """``fleet run ARGS --json`` against ``server``: the events, checked against the contract, and a record."""
    mark = server.log_size()
    started = time.monotonic()
    env = server.fleet_env(max_tokens) | (settings or {})
    result = run_fleet(["run", *args, "--json", "--timeout", str(timeout)], tmp_path, env, timeout=timeout + 30)
    seconds = time.monotonic() - started
    events = json_events(result.stdout)
    problems = event_problems(events)
    assert not problems, f"{problems}\nstderr: {result.stderr[-2000:]}"
    last = events[-1]
    data = last["data"]
    assert isinstance(data, dict)
    expected = {"turn.completed": 3 if data.get("unverified") else 0, "turn.incomplete": 4, "turn.failed": 1}
    assert last["type"] in expected, last
    assert result.returncode == expected[str(last["type"])], result.stderr[-2000:]
    text = str(data["answer"] if last["type"] != "turn.failed" else data["reason"])
    record = TurnRecord(
        args[0][:30], server.spec.alias, str(last["type"]), seconds, server.speed(mark).describe(), text
    )
    return events, record


@pytest.mark.timeout(DIRECT_TIMEOUT + 60)
def test_a_direct_turn_completes_with_an_answer(
    small_model: RealModelServer, tmp_path: Path, record_turn: list[TurnRecord]
) -> None:
    events, record = run_turn(
        small_model, tmp_path, ["Name the capital city of France, in one word.", "--mode", "direct"], DIRECT_TIMEOUT
    )
    record_turn.append(record)
    assert events[-1]["type"] == "turn.completed", record
    assert record.text.strip()


def rlm_csv_turn(
    server: RealModelServer, tmp_path: Path, timeout: int, max_tokens: int = 1024
) -> tuple[Events, TurnRecord]:
    rows = "".join(f"r{i},{value}\n" for i, value in enumerate(REVENUE))
    (tmp_path / "sales.csv").write_text("region,revenue\n" + rows)
    args = [CSV_TASK, "--file", "sales.csv", "--mode", "rlm", "--max-iterations", "4"]
    events, record = run_turn(server, tmp_path, args, timeout, max_tokens)
    assert "iteration.started" in {e["type"] for e in events}
    return events, record


@pytest.mark.timeout(SMALL_RLM_TIMEOUT + 60)
def test_an_rlm_turn_of_the_small_model_ends_with_a_reason_or_an_answer(
    small_model: RealModelServer, tmp_path: Path, record_turn: list[TurnRecord]
) -> None:
    _, record = rlm_csv_turn(small_model, tmp_path, SMALL_RLM_TIMEOUT, SMALL_MAX_TOKENS)
    record_turn.append(record)


@pytest.mark.timeout(SMALL_RLM_TIMEOUT + 60)
def test_replies_that_do_not_parse_do_not_end_the_turn(
    small_model: RealModelServer, tmp_path: Path, record_turn: list[TurnRecord]
) -> None:
    """Replies cut off at a few tokens can never reach the ``code`` field: each one is an observation, the
    turn goes on, and it ends incomplete (no code ever ran), never failed by a parse error."""
    events, record = rlm_csv_turn(small_model, tmp_path, SMALL_RLM_TIMEOUT, max_tokens=12)
    record_turn.append(record)
    told = [e for e in events if e["type"] == "warning" and "did not follow the format" in str(e["data"])]
    iterations = [e for e in events if e["type"] == "iteration.started"]
    assert len(told) >= 2 and len(iterations) >= 2, record
    last = events[-1]
    assert last["type"] == "turn.incomplete", record
    assert "could not be read" in str(last["data"]), record


def large_model_deadline(pace: Speed, calls: int, read: int, written: int) -> int:
    """Seconds for a turn of ``calls`` model calls that read ``read`` new tokens and write ``written`` in all."""
    seconds = 2 * pace.seconds_for(read, written) + 10 * calls  # and the sandbox's time for each step
    return round(min(MAX_RLM_TIMEOUT, max(RLM_TIMEOUT, seconds)))


@pytest.mark.timeout(MAX_RLM_TIMEOUT + 60, func_only=True)  # the server's start and pace are timed apart
def test_an_rlm_answer_of_the_large_model_is_true_or_honestly_not_claimed(
    large_model: RealModelServer, large_pace: Speed, tmp_path: Path, record_turn: list[TurnRecord]
) -> None:
    # Four steps and the answer read up to ~5,000 new tokens and write ~600 (the run's summary lists them).
    deadline = large_model_deadline(large_pace, calls=5, read=5000, written=600)
    events, record = rlm_csv_turn(large_model, tmp_path, deadline)
    record_turn.append(record)
    assert "code" in {e["type"] for e in events}, record  # the large model follows the format
    last = events[-1]
    data = last["data"]
    assert isinstance(data, dict)
    if last["type"] == "turn.completed" and not data["unverified"]:
        assert sum(REVENUE) in numbers_in(str(data["answer"])), f"a wrong answer claimed as a result: {record}"
    else:  # marked unverified (exit 3) or incomplete (exit 4), as run_turn checked: never a plain success
        assert last["type"] in ("turn.completed", "turn.incomplete"), record


@pytest.mark.timeout(MAX_RLM_TIMEOUT + 60, func_only=True)  # the server's start and pace are timed apart
def test_a_task_that_cannot_succeed_ends_incomplete_not_invented(
    large_model: RealModelServer, large_pace: Speed, tmp_path: Path, record_turn: list[TurnRecord]
) -> None:
    (tmp_path / "sales.csv").write_text("region,revenue\nnorth,10\n")
    task = (
        "Load files/sales.csv with the polars library (import polars as pl; pl.read_csv) and report the number of "
        "rows. You must use polars."
    )
    args = [task, "--file", "sales.csv", "--mode", "rlm", "--max-iterations", "6"]
    # The loop guard is set to stop at the second identical failure, so that it can fire within three
    # replies; they read ~4,000 new tokens and write ~300.
    guard = {"FLEET_LOOP_GUARD_WARN_AFTER": "1", "FLEET_LOOP_GUARD_STOP_AFTER": "2"}
    deadline = large_model_deadline(large_pace, calls=3, read=4000, written=300)
    events, record = run_turn(large_model, tmp_path, args, deadline, settings=guard)
    record_turn.append(record)
    assert any(e["type"] == "execution.failed" for e in events), "polars is not installed: its import must fail"
    last = events[-1]
    data = last["data"]
    assert isinstance(data, dict)
    # The loop guard stops the same failing code; a model that changes course instead must not claim
    # an answer its code could not compute.
    if last["type"] == "turn.incomplete":
        assert "failed the same way" in str(data["reason"]) or "no code ran successfully" in str(data["reason"])
    elif last["type"] == "turn.failed":  # the deadline came first: a reason, and no answer
        assert "deadline" in str(data["reason"]), record
    else:  # the model changed course (csv, pandas): a count it claims as checked must be the true one
        assert last["type"] == "turn.completed", record
        if not data["unverified"]:
            claimed = numbers_in(str(data["answer"]))
            assert not claimed or 1 in claimed, f"a wrong row count claimed as a result: {record}"
