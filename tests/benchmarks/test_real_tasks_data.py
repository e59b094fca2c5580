"""The quality benchmark's tasks: their data is the same on every run and their checks tell right from wrong."""

from __future__ import annotations

import json

import pytest
from benchmarks.real_tasks_data import INLINE_LIMIT, TASKS, has_number

from fleet_rlm.engine.numbers import numbers_in


def test_numbers_are_read_with_thousands_separators_and_decimals() -> None:
    assert numbers_in("The total is **29,342** (mean 97.15, 3 regions).") == [29342.0, 97.15, 3.0]
    assert has_number("about 1,032 units", 1032, tolerance=0)
    assert not has_number("about 1,033 units", 1032, tolerance=0)


@pytest.mark.parametrize("name", list(TASKS))
def test_each_task_accepts_its_answer_and_refuses_a_wrong_one(name: str) -> None:
    task = TASKS[name]()
    assert task.check(f"The answer: {task.expected}.")
    assert not task.check("I could not find it; the answer is 0.")
    assert not task.check("")


@pytest.mark.parametrize("name", list(TASKS))
def test_the_data_is_generated_the_same_way_every_time(name: str) -> None:
    first, second = TASKS[name](), TASKS[name]()
    assert first.files == second.files
    assert first.expected == second.expected


def test_the_needle_is_in_two_megabytes_once() -> None:
    task = TASKS["needle"]()
    text = task.files["files/archive.txt"]
    assert len(text) >= 2_000_000
    assert text.count(task.expected) == 1
    assert task.inline_text() is None  # too large to write into the direct route's task


def test_classification_passes_at_the_threshold_and_not_below() -> None:
    task = TASKS["classify"]()
    lines = task.files["files/reviews.jsonl"].splitlines()
    ids = [json.loads(line)["id"] for line in lines]
    positive = [int(i) for i in task.expected.split()]
    negative = [i for i in ids if i not in positive]
    assert task.check(" ".join(map(str, positive[:-1])))  # one miss of 12: 92%
    assert task.check(" ".join(map(str, [*positive, negative[0]])))  # one false positive: 92%
    assert not task.check(" ".join(map(str, positive[:-3])))  # three misses: 75%
    assert not task.check(" ".join(map(str, ids)))  # everything positive: 50%


def test_small_tasks_are_written_into_the_direct_routes_task() -> None:
    task = TASKS["csv_total"]()
    inline = task.inline_text()
    assert inline is not None and task.size <= INLINE_LIMIT
    assert inline.startswith(task.text)
    assert task.files["files/sales.csv"] in inline


def test_the_revenue_task_is_met_by_its_answer_or_by_the_saved_csv() -> None:
    task = TASKS["revenue_artifact"]()
    totals = dict(pair.split() for pair in task.expected.split(", "))
    right = "region,revenue\n" + "".join(f"{region.title()},{total}.0\n" for region, total in totals.items())
    swapped = right.replace("North", "Tmp").replace("South", "North").replace("Tmp", "South")
    assert task.passes("Saved the file.", right)
    assert not task.passes("Saved the file.", swapped)  # every total, but on the wrong regions' rows
    assert not task.passes("Saved the file.", right.splitlines()[0] + "\n" + right.splitlines()[1])  # one region
    assert not task.passes("Saved the file.", None)
    assert task.passes(" ".join(f"{region}: {int(total):,}" for region, total in totals.items()), None)


def test_the_log_count_runs_over_thirty_thousand_lines() -> None:
    task = TASKS["log_count"]()
    lines = task.files["files/service.log"].splitlines()
    assert len(lines) == 30_000
    assert sum(1 for line in lines if " ERROR payments " in line) == int(task.expected)
