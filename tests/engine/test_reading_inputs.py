"""The model is sent from its inputs to the files, and a submitted answer that never read a file the
task names is not claimed. Seen with the real 1.5B model: it printed `task` and `workspace` four times
in a row, indexed the manifest's text as rows, and submitted a count of one file of a join."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleet_rlm.engine.honesty import shows_only_inputs, unread_inputs
from fleet_rlm.models.scripted import rlm_step

from .conftest import Harness

SALES = {"sales.csv": "region,amount\nnorth,3\n"}
SUM_SALES = "import csv\nprint(sum(int(r['amount']) for r in csv.DictReader(open('files/sales.csv'))))"


def prompt_text(request: dict[str, Any]) -> str:
    return json.dumps(request.get("messages")).replace("\\n", "\n")


def test_the_manifest_says_it_is_a_listing_and_how_to_read_a_file(harness: Harness) -> None:
    harness.server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"))
    harness.run("Total amount?", files=SALES)

    first = prompt_text(harness.server.model.requests_for("root")[0])
    read = "import pandas as pd; df = pd.read_csv('files/sales.csv')"
    assert f"it is not their data. Read a file by its path, e.g. `{read}`." in first
    assert "`task`, `workspace` and `history` are shown to you in full below: never print them." in first


def test_code_that_only_shows_the_inputs_is_told_to_read_the_files(harness: Harness) -> None:
    harness.server.script(
        "root",
        rlm_step("Look first.", "# what do I have?\nprint(task)\nprint(workspace)\nhistory"),
        rlm_step("Read it.", SUM_SALES),
        rlm_step("Done.", "SUBMIT(answer='3')"),
    )

    run = harness.run("Total amount?", files=SALES)

    assert (run.outcome.status, run.outcome.answer, run.outcome.unverified) == ("completed", "3", False)
    requests = harness.server.model.requests_for("root")
    told = prompt_text(requests[1])
    assert "[Fleet] `task`, `workspace` and `history` are already in your prompt" in told
    assert "by their paths, such as:\nimport pandas as pd; df = pd.read_csv('files/sales.csv')" in told
    assert "already in your prompt" not in prompt_text(requests[2]).split("Read it.")[-1]


def test_without_files_code_that_only_shows_the_inputs_is_told_to_compute(harness: Harness) -> None:
    harness.server.script(
        "root", rlm_step("Look.", "print(workspace)"), rlm_step("Compute.", "SUBMIT(answer=str(1250 - 37 * 14 + 300))")
    )

    run = harness.run("A warehouse holds 1250 units ...")

    assert run.outcome.answer == "1032"
    told = prompt_text(harness.server.model.requests_for("root")[1])
    assert "Your next code must compute the answer (there are no files), then SUBMIT it" in told


@pytest.mark.parametrize(
    ("code", "only_inputs"),
    [
        ("print(task)\nprint(workspace)", True),
        ("# look\nworkspace", True),
        ("print(task, history)", True),
        ("print(workspace.splitlines()[0])", False),
        ("print(task)\nimport pandas", False),
        ("print(task, file=open('x', 'w'))", False),
        ("print()", False),
        ("", False),
        ("print(task", False),
    ],
)
def test_showing_the_inputs_is_told_from_other_code(code: str, only_inputs: bool) -> None:
    assert shows_only_inputs(code) is only_inputs


JOIN_TASK = (
    "files/orders.csv lists orders by customer_id; files/customers.csv gives each customer's tier. "
    "How many orders were placed by gold-tier customers?"
)
JOIN_FILES = {
    "orders.csv": "order_id,customer_id\n1,1\n2,1\n3,2\n",
    "customers.csv": "customer_id,tier\n1,gold\n2,silver\n",
}
GOLD_CUSTOMERS = "import csv\nrows = [r for r in csv.DictReader(open('files/customers.csv')) if r['tier'] == 'gold']\nprint(len(rows))"


def test_a_submitted_answer_that_never_read_a_file_the_task_names_is_unverified(harness: Harness) -> None:
    harness.server.script(
        "root", rlm_step("Count.", GOLD_CUSTOMERS), rlm_step("Done.", "SUBMIT(answer=str(len(rows)))")
    )

    run = harness.run(JOIN_TASK, files=JOIN_FILES)

    outcome = run.outcome
    assert (outcome.status, outcome.answer, outcome.answer_source) == ("completed", "1", "submitted")
    assert outcome.unverified_reason == (
        "the task names 'files/orders.csv', which no code of this turn read, so the answer cannot have used it"
    )


def test_a_submitted_answer_from_code_that_read_every_named_file_is_claimed(harness: Harness) -> None:
    join = (
        "import csv\ngold = {r['customer_id'] for r in csv.DictReader(open('files/customers.csv')) "
        "if r['tier'] == 'gold'}\n"
        "orders = [r for r in csv.DictReader(open('files/orders.csv')) if r['customer_id'] in gold]\nprint(len(orders))"
    )
    harness.server.script("root", rlm_step("Join.", join), rlm_step("Done.", "SUBMIT(answer=str(len(orders)))"))

    run = harness.run(JOIN_TASK, files=JOIN_FILES)

    assert (run.outcome.answer, run.outcome.unverified) == ("2", False)


def test_code_that_finds_its_files_by_a_pattern_or_mentions_them_in_another_name_reads_none() -> None:
    inputs = ["files/a.csv", "files/orders.csv", "files/notes.txt"]
    task = "Compare data.csv with files/orders.csv"
    assert unread_inputs(task, inputs, ["glob.glob('files/*.csv')", "open('files/big_orders.csv')"]) == [
        "files/orders.csv"
    ]
    assert unread_inputs(task, inputs, ["pd.read_csv('orders.csv')"]) == []
    assert unread_inputs("Read notes.txt.", inputs, []) == ["files/notes.txt"]
