"""The model is sent from its inputs to the files, and a submitted answer that never read a file the
task names is not claimed. Seen with the real 1.5B model: it printed `task` and `workspace` four times
in a row, indexed the manifest's text as rows, and submitted a count of one file of a join."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleet_rlm.engine.honesty import shows_only_inputs
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
    assert "it is not their data. Read a file by its path, e.g. `pd.read_csv('files/sales.csv')`." in first
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
    assert "read the data from the files by their paths, such as:\npd.read_csv('files/sales.csv')" in told
    assert "already in your prompt" not in prompt_text(requests[2]).split("Read it.")[-1]


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
