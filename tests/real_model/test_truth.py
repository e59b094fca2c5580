"""The truth with a real model: an answer Fleet calls a success is right, or the turn says it is not.

Run against the large local model (Qwen2.5-Coder 1.5B, temperature 0) through the real ``fleet run``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleet_rlm.testing.cli import json_events, run_fleet
from fleet_rlm.testing.real_model import RealModelServer

from .conftest import TurnRecord

pytestmark = pytest.mark.real_model

TURN_TIMEOUT = 300
REVENUE = {"north": [120, 75, 310], "south": [42, 98], "east": [205, 61, 134]}
TRUE_TOTAL = sum(sum(values) for values in REVENUE.values())


def fleet_run(server: RealModelServer, tmp_path: Path, args: list[str]) -> tuple[int, list[dict[str, object]]]:
    env = {**server.fleet_env(), "FLEET_LM_TEMPERATURE": "0"}
    result = run_fleet(
        ["run", *args, "--json", "--timeout", str(TURN_TIMEOUT)], tmp_path, env, timeout=TURN_TIMEOUT + 60
    )
    return result.returncode, json_events(result.stdout)


def numbers_in(text: str) -> list[float]:
    return [float(n.replace(",", "")) for n in re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)]


@pytest.mark.timeout(TURN_TIMEOUT + 120)
def test_an_rlm_answer_over_a_csv_is_true_or_honestly_not_claimed(
    large_model: RealModelServer, tmp_path: Path, record_turn: list[TurnRecord]
) -> None:
    rows = "".join(f"{region},{value}\n" for region, values in REVENUE.items() for value in values)
    (tmp_path / "sales.csv").write_text("region,revenue\n" + rows)
    task = "What is the total of the revenue column in files/sales.csv? Answer with the number."
    code, events = fleet_run(
        large_model, tmp_path, [task, "--file", "sales.csv", "--mode", "rlm", "--max-iterations", "6"]
    )
    last = events[-1]
    data = last["data"]
    assert isinstance(data, dict)
    record_turn.append(
        TurnRecord(
            "rlm csv truth",
            large_model.spec.alias,
            str(last["type"]),
            0.0,
            "",
            str(data.get("answer") or data.get("reason")),
        )
    )
    if last["type"] == "turn.completed" and not data["unverified"]:
        assert code == 0
        assert TRUE_TOTAL in numbers_in(str(data["answer"])), f"a wrong answer claimed as a result: {data['answer']!r}"
    elif last["type"] == "turn.completed":
        assert code == 3  # unverified: marked so everywhere
    else:
        assert last["type"] == "turn.incomplete" and code == 4, last


@pytest.mark.timeout(TURN_TIMEOUT + 120)
def test_a_task_that_cannot_succeed_ends_incomplete_not_invented(
    large_model: RealModelServer, tmp_path: Path, record_turn: list[TurnRecord]
) -> None:
    (tmp_path / "sales.csv").write_text("region,revenue\nnorth,10\n")
    task = (
        "Load files/sales.csv with the polars library (import polars as pl; pl.read_csv) and report the number of "
        "rows. You must use polars."
    )
    code, events = fleet_run(
        large_model, tmp_path, [task, "--file", "sales.csv", "--mode", "rlm", "--max-iterations", "6"]
    )
    last = events[-1]
    data = last["data"]
    assert isinstance(data, dict)
    record_turn.append(
        TurnRecord(
            "impossible task",
            large_model.spec.alias,
            str(last["type"]),
            0.0,
            "",
            str(data.get("answer") or data.get("reason")),
        )
    )
    failures = [e for e in events if e["type"] == "execution.failed"]
    assert failures, "polars is not installed: the model's code must have failed"
    # Never a plain success built on code that could not run: either the turn stops honestly, or the
    # model changed course (the loop guard told it to) and its answer was computed or marked unverified.
    if last["type"] == "turn.incomplete":
        assert code == 4
        assert "failed the same way" in str(data["reason"]) or "no code ran successfully" in str(data["reason"])
    else:
        assert last["type"] == "turn.completed", last
        assert code in (0, 3)
