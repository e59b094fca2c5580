"""Honest outcomes: how an answer was reached, failed executions shown, no answer made up from errors,
no loop on one failure. Each scripted model here follows the prompt; the behaviour under test is
what Fleet does around it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleet_rlm.engine.honesty import submit_suggestion
from fleet_rlm.engine.turn import HistoryEntry
from fleet_rlm.models.scripted import fields_reply, rlm_step
from fleet_rlm.protocol.events import EventType
from fleet_rlm.testing.turn_events import event_problems

from .conftest import Harness


def prompt_text(request: dict[str, Any]) -> str:
    return json.dumps(request.get("messages"))


def test_a_submitted_answer_says_so(harness: Harness) -> None:
    harness.server.script("root", rlm_step("Compute.", "SUBMIT(answer=str(6 * 7))"))
    run = harness.run("Multiply")
    assert run.outcome.status == "completed"
    assert (run.outcome.answer, run.outcome.answer_source, run.outcome.unverified) == ("42", "submitted", False)
    completed = run.of(EventType.TURN_COMPLETED)[0].data
    assert (completed["answer_source"], completed["unverified"], completed["unverified_reason"]) == (
        "submitted",
        False,
        None,
    )


def test_a_failed_execution_streams_its_error_type_message_line_and_traceback(harness: Harness) -> None:
    failing = "values = [1, 2]\ntotal = sum(values)\nprint(total / 0)"
    harness.server.script("root", rlm_step("Divide.", failing), rlm_step("Fix.", "SUBMIT(answer='fixed')"))
    run = harness.run("Divide")
    assert run.outcome.status == "completed"
    [failure] = run.of(EventType.EXECUTION_FAILED)
    assert failure.data["error_type"] == "ZeroDivisionError"
    assert failure.data["message"] == "division by zero"
    assert failure.data["line"] == 3
    assert "print(total / 0)" in failure.data["traceback"]
    assert "worker.py" not in failure.data["traceback"]
    # It belongs to the iteration whose code failed, right after that code.
    codes = run.of(EventType.CODE)
    assert failure.span_id == codes[0].span_id
    assert failure.seq > codes[0].seq


def test_a_syntax_error_is_an_execution_failure_too(harness: Harness) -> None:
    harness.server.script("root", rlm_step("Oops.", "print('a'\n"), rlm_step("Fix.", "SUBMIT(answer='ok')"))
    run = harness.run("Syntax")
    [failure] = run.of(EventType.EXECUTION_FAILED)
    assert failure.data["error_type"] == "SyntaxError"
    assert failure.data["line"] == 1


def test_the_model_is_told_what_it_can_import_and_what_to_use_instead_of_a_missing_module(harness: Harness) -> None:
    harness.server.script(
        "root", rlm_step("Use sklearn.", "import sklearn"), rlm_step("Use scipy.", "SUBMIT(answer='done')")
    )
    run = harness.run("Load the data")
    assert run.outcome.status == "completed"
    first, second = harness.server.model.requests_for("root")[:2]
    assert "You can import the Python standard library and these installed packages:" in prompt_text(first)
    observation = prompt_text(second)
    assert "No module named 'sklearn'" in observation
    assert "'sklearn' is not installed in the sandbox and cannot be installed" in observation
    assert "the standard library is available (csv, json" in observation


def test_the_same_failure_twice_gets_plain_advice_and_four_times_ends_the_turn_incomplete(harness: Harness) -> None:
    same = rlm_step("Load it.", "import polars as pl\ndf = pl.read_csv('files/sales.csv')")
    # Layout and comments differ: it is still the same code.
    reworded = rlm_step("Again.", "import polars as pl   # try again\n\ndf = pl.read_csv('files/sales.csv')")
    harness.server.script("root", same, reworded, same, reworded, rlm_step("Never reached.", "SUBMIT(answer='x')"))

    run = harness.run("Revenue by region", files={"sales.csv": "region,amount\nnorth,3\n"}, max_iterations=10)

    assert run.outcome.status == "incomplete"
    assert "the same code failed the same way 4 times in a row" in str(run.outcome.error)
    assert "ModuleNotFoundError: No module named 'polars'" in str(run.outcome.error)
    assert str(run.outcome.answer).startswith("I could not compute the result:")
    assert len(run.of(EventType.EXECUTION_FAILED)) == 4
    [terminal] = run.of(EventType.TURN_INCOMPLETE)
    assert terminal.data["answer"] == run.outcome.answer
    assert terminal.data["reason"] == run.outcome.error
    requests = harness.server.model.requests_for("root")
    assert len(requests) == 4  # stopped at once: no fifth attempt, no extract step
    assert "[Fleet] This same code has now failed with the same error 2 times" in prompt_text(requests[2])
    assert "[Fleet] This same code" not in prompt_text(requests[1])


def test_a_repeated_error_whose_message_spans_lines_ends_the_turn_with_a_one_line_reason(harness: Harness) -> None:
    """A SyntaxError's message quotes the offending line on a line of its own (what a small model's
    ``!pip install polars`` gets); the turn's reason stays one line, the line quoted in it."""
    shell = rlm_step("Install it.", "import os\n!pip install polars")
    harness.server.script("root", shell, shell, shell, shell, rlm_step("Never reached.", "SUBMIT(answer='x')"))

    run = harness.run("Revenue by region", max_iterations=10)

    assert run.outcome.status == "incomplete"
    [terminal] = run.of(EventType.TURN_INCOMPLETE)
    reason = terminal.data["reason"]
    assert "\n" not in reason and "SyntaxError" in reason and "!pip install polars" in reason, reason
    assert event_problems([e.to_dict() for e in run.events]) == []


def test_the_same_output_twice_from_the_same_code_is_met_with_advice_to_submit(harness: Harness) -> None:
    """Seen with a real 1.5B model: it printed the right total, then ran the same code until the budget ended."""
    total = rlm_step(
        "Sum it.", "print(sum(int(line.split(',')[1]) for line in open('files/sales.csv').readlines()[1:]))"
    )
    harness.server.script("root", total, total, total, rlm_step("Done.", "SUBMIT(answer='3')"))

    run = harness.run("Total amount?", files={"sales.csv": "region,amount\nnorth,3\n"}, max_iterations=10)

    assert (run.outcome.status, run.outcome.answer) == ("completed", "3")
    requests = harness.server.model.requests_for("root")
    assert "[Fleet] This is the same output" not in prompt_text(requests[1])
    told = prompt_text(requests[2])
    assert "[Fleet] This is the same output, with the same files written, for the second time" in told
    # The call to write is built from what the code prints.
    assert (
        "SUBMIT(answer=str(sum((int(line.split(',')[1]) for line in open('files/sales.csv').readlines()[1:]))))"
        in told.replace("\\n", "\n").replace('\\"', '"')
    )
    assert "the turn answers from this work" not in told


def test_a_different_error_resets_the_count(harness: Harness) -> None:
    steps = [rlm_step("A.", "1/0"), rlm_step("B.", "1/0"), rlm_step("C.", "[][1]"), rlm_step("D.", "1/0")]
    harness.server.script("root", *steps, rlm_step("E.", "SUBMIT(answer='done')"))
    run = harness.run("Anything", max_iterations=10)
    assert run.outcome.status == "completed"
    assert run.outcome.answer == "done"


def test_no_successful_execution_means_no_extract_and_an_incomplete_turn(harness: Harness) -> None:
    harness.server.script("root", rlm_step("A.", "1/0"), rlm_step("B.", "open('files/missing.csv')"))
    harness.server.script("root", fields_reply(answer="north 702, south 468"))  # an extract reply, never asked for

    run = harness.run("Revenue", max_iterations=2)

    assert run.outcome.status == "incomplete"
    assert run.outcome.error == (
        "the iteration budget ran out and no code ran successfully; the last error was: "
        "FileNotFoundError: [Errno 2] No such file or directory: 'files/missing.csv'"
    )
    assert "702" not in str(run.outcome.answer)
    assert len(harness.server.model.requests_for("root")) == 2
    assert [e.data["budget"] for e in run.of(EventType.BUDGET_EXHAUSTED)] == ["iterations"]


def test_an_extracted_answer_is_completed_but_unverified(harness: Harness) -> None:
    harness.server.script("root", rlm_step("Look.", "print(sum([1, 2, 3]))"), fields_reply(answer="The total is 6."))

    run = harness.run("Total", max_iterations=1)

    assert run.outcome.status == "completed"
    assert run.outcome.answer == "The total is 6."
    assert run.outcome.answer_source == "extracted"
    assert run.outcome.unverified
    completed = run.of(EventType.TURN_COMPLETED)[0].data
    assert completed["unverified"] is True
    assert "not checked by running code" in completed["unverified_reason"]
    warnings = [e.data["message"] for e in run.of(EventType.WARNING)]
    assert any("(unverified)" in message for message in warnings)


def test_a_direct_answer_says_it_came_without_code(harness: Harness) -> None:
    harness.server.script("root", fields_reply(reasoning="Greeting.", answer="Hello!"))
    run = harness.run("Say hello", mode="direct")
    assert (run.outcome.status, run.outcome.answer_source, run.outcome.unverified) == ("completed", "direct", False)


def test_a_direct_answer_with_numbers_it_was_not_given_is_unverified(harness: Harness) -> None:
    harness.server.script("root", fields_reply(reasoning="Adding up.", answer="The total is **13,025**."))
    run = harness.run("Add these up: 10, 20, 30, 4000", mode="direct")
    assert (run.outcome.status, run.outcome.answer_source, run.outcome.unverified) == ("completed", "direct", True)
    completed = run.of(EventType.TURN_COMPLETED)[0].data
    assert completed["unverified"] is True
    assert "(13025)" in completed["unverified_reason"]
    assert "mode rlm" in completed["unverified_reason"]


def test_a_direct_answer_that_only_repeats_the_messages_numbers_or_numbers_its_points_is_not_flagged(
    harness: Harness,
) -> None:
    answer = "Of 10, 20 and 4,000 the largest is 4,000.\n\n1. Compare them.\n2) Pick the largest."
    harness.server.script("root", fields_reply(reasoning="Comparing.", answer=answer))
    run = harness.run("Which is largest: 10, 20 or 4000?", mode="direct")
    assert (run.outcome.answer_source, run.outcome.unverified) == ("direct", False)


def test_a_direct_answer_picking_numbers_out_of_data_in_the_message_is_unverified(harness: Harness) -> None:
    reviews = "".join(f'{{"id": {i}, "text": "review number {i}"}}\n' for i in range(1, 13))
    harness.server.script("root", fields_reply(reasoning="Reading them.", answer="1, 3, 5, 7, 8, 9, 10 and 12"))
    run = harness.run(f"Which of these reviews are positive? Answer with their ids.\n{reviews}", mode="direct")
    assert (run.outcome.status, run.outcome.answer_source, run.outcome.unverified) == ("completed", "direct", True)
    reason = run.of(EventType.TURN_COMPLETED)[0].data["unverified_reason"]
    assert "picked numbers (1, 3, 5, 7, 8, ...) out of the data in the message (12 numbers)" in reason
    assert "without running code" in reason


def test_a_direct_answer_quoting_an_earlier_answer_is_not_flagged(harness: Harness) -> None:
    table = "| region | total |\n" + "".join(f"| r{i} | {1000 + i} |\n" for i in range(12))
    harness.server.script("root", fields_reply(reasoning="From the table.", answer="r3 took 1003."))
    run = harness.run("What did r3 take?", history=[HistoryEntry("Total the regions.", table)], mode="direct")
    assert (run.outcome.answer, run.outcome.unverified) == ("r3 took 1003.", False)


def test_a_child_agent_follows_the_same_loop_guard(harness: Harness) -> None:
    parent = "r = spawn_agent('CHILD loops')\nprint(r['status'], r['error'])\nSUBMIT(answer=r['status'])"
    harness.server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    harness.server.script_for_task("root", "CHILD loops", *[rlm_step("Again.", "import polars")] * 4)

    run = harness.run("PARENT")

    assert run.outcome.status == "completed"
    assert run.outcome.answer == "incomplete"
    [finished] = run.of(EventType.CHILD_FINISHED)
    assert finished.data["outcome"] == "incomplete"
    assert "4 times in a row" in finished.data["error"]


def test_steps_the_model_cycles_through_count_as_repeated_work(harness: Harness) -> None:
    """Seen with a real 1.5B model: print the result, print it again, write no code, and round again."""
    show = rlm_step("Print it.", "print(sum([3, 4]))")
    cycle = [show, show, rlm_step("It was printed.", "")]

    def root(request: dict[str, Any]) -> str:
        if "extract the final outputs now" in prompt_text(request):
            return fields_reply(answer="The total is 7.")
        return cycle[len(harness.server.model.requests_for("root")) % len(cycle) - 1]

    harness.server.model.default = root
    run = harness.run("Total of 3 and 4?", max_iterations=20)

    assert run.outcome.status == "completed", run.outcome.error
    assert (run.outcome.answer, run.outcome.answer_source, run.outcome.unverified) == (
        "The total is 7.",
        "extracted",
        True,
    )
    assert "the same work was done 4 times (the same output, the same files written)" in str(
        run.outcome.unverified_reason
    )
    # print, print (advice), nothing, print, print: the fourth run of the same print ends the loop.
    assert run.outcome.usage["iterations"] == 5


@pytest.mark.parametrize(
    ("code", "suggested"),
    [
        (
            "df = load()\nprint(df.groupby('region').revenue.sum())",
            "SUBMIT(answer=str(df.groupby('region').revenue.sum()))",
        ),
        ("print('rows:', n)\nprint(f'total {t}')", "SUBMIT(answer=f'total {t}')"),
        ("print(a, b)", "SUBMIT(answer=' '.join(str(v) for v in (a, b)))"),
        ("x = 1", 'SUBMIT(answer="<the answer, with its figures>")'),
        ("print(task)\nprint(workspace)", 'SUBMIT(answer="<the answer, with its figures>")'),
        ("print(total)\nprint(task)", "SUBMIT(answer=str(total))"),
        ("!pip install polars", 'SUBMIT(answer="<the answer, with its figures>")'),
        (
            "r = df.groupby('region').revenue.sum()\nr.to_csv('artifacts/revenue_by_region.csv', index=False)",
            "SUBMIT(answer='Saved artifacts/revenue_by_region.csv:\\n' + r.to_string())",
        ),
        ("a.to_csv('a.csv')\nb.to_json(path)", "SUBMIT(answer=b.to_string())"),
        ("print(total)\nr.to_csv('artifacts/r.csv')", "SUBMIT(answer=str(total))"),
    ],
)
def test_the_submit_call_suggested_hands_in_what_the_code_prints_last(code: str, suggested: str) -> None:
    assert submit_suggestion(code) == suggested


def test_a_result_printed_again_by_other_code_is_met_with_advice_to_submit_it(harness: Harness) -> None:
    """Seen with a real 1.5B model: it computed and printed the total, then printed the variable again."""
    harness.server.script(
        "root",
        rlm_step("Sum it.", "total = sum([29000, 342])\nprint(total)"),
        rlm_step("Print the result.", "print(total)"),
        rlm_step("Submit.", "SUBMIT(answer=str(total))"),
    )
    run = harness.run("Total?", max_iterations=10)

    assert (run.outcome.status, run.outcome.answer, run.outcome.answer_source) == ("completed", "29342", "submitted")
    told = prompt_text(harness.server.model.requests_for("root")[2])
    assert "[Fleet] This is the same output, with the same files written, for the second time" in told
    assert "SUBMIT(answer=str(total))" in told


def test_code_that_prints_nothing_is_not_taken_for_a_repeated_result(harness: Harness) -> None:
    harness.server.script(
        "root",
        rlm_step("Load.", "rows = [1, 2]"),
        rlm_step("Sum.", "total = sum(rows)"),
        rlm_step("Submit.", "SUBMIT(answer=str(total))"),
    )
    run = harness.run("Total?", max_iterations=10)

    assert (run.outcome.status, run.outcome.answer) == ("completed", "3")
    assert all("[Fleet]" not in prompt_text(r) for r in harness.server.model.requests_for("root"))


def test_a_model_that_writes_no_code_after_its_result_gets_an_answer_from_that_work(harness: Harness) -> None:
    """Seen with a real 1.5B model: it printed the right mean, then sent empty code four times."""

    def root(request: dict[str, Any]) -> str:
        if "extract the final outputs now" in prompt_text(request):
            return fields_reply(answer="The mean is 97.15.")
        if len(harness.server.model.requests_for("root")) == 1:
            return rlm_step("Compute.", "print('mean is 97.15')")
        return rlm_step("Done.", "")

    harness.server.model.default = root
    run = harness.run("Mean?", max_iterations=8)

    assert run.outcome.status == "completed", run.outcome.error
    assert (run.outcome.answer, run.outcome.answer_source) == ("The mean is 97.15.", "extracted")
    assert "the model replied 4 times with no code instead of submitting a result" in str(run.outcome.unverified_reason)
    assert run.outcome.usage["iterations"] == 5
    # From the first empty reply on, the model is shown the call that submits what it printed.
    told = prompt_text(harness.server.model.requests_for("root")[2]).replace("\\n", "\n")
    assert "[Fleet] Your reply held no code, so nothing ran." in told
    assert "one line that submits it, such as:\nSUBMIT(answer='mean is 97.15')" in told


def test_an_empty_reply_after_a_result_is_told_the_submit_call_and_goes_on(harness: Harness) -> None:
    harness.server.script(
        "root",
        rlm_step("Compute.", "total = 3 + 4\nprint(f'The total is {total}.')"),
        rlm_step("Done.", "# nothing more to do\n"),
        rlm_step("Submit.", "SUBMIT(answer=f'The total is {total}.')"),
    )

    run = harness.run("Total of 3 and 4?")

    assert (run.outcome.answer, run.outcome.answer_source, run.outcome.unverified) == (
        "The total is 7.",
        "submitted",
        False,
    )
    told = prompt_text(harness.server.model.requests_for("root")[2]).replace("\\n", "\n")
    assert "such as:\nSUBMIT(answer=f'The total is {total}.')" in told


def test_a_saved_table_written_again_is_met_with_the_call_that_submits_that_table(harness: Harness) -> None:
    """Seen with a real 1.5B model on the README's job: it saved the right CSV, printing nothing, three
    more times; told only a generic SUBMIT call, the turn ended extracted (unverified)."""
    save = (
        "import pandas as pd\ndf = pd.read_csv('files/sales.csv')\n"
        "r = df.groupby('region')['amount'].sum()\nr.to_csv('artifacts/revenue_by_region.csv')"
    )
    harness.server.script(
        "root",
        rlm_step("Save it.", save),
        rlm_step("Save it.", save),
        rlm_step("Submit.", "SUBMIT(answer='Saved artifacts/revenue_by_region.csv:\\n' + r.to_string())"),
    )

    run = harness.run(
        "Revenue by region", files={"sales.csv": "region,amount\nnorth,3\nsouth,4\nnorth,5\n"}, max_iterations=6
    )

    assert (run.outcome.status, run.outcome.answer_source, run.outcome.unverified) == ("completed", "submitted", False)
    assert run.outcome.answer.startswith("Saved artifacts/revenue_by_region.csv:\n")
    assert "north    8" in run.outcome.answer
    requests = harness.server.model.requests_for("root")
    told = "".join(str(message["content"]) for message in requests[2]["messages"])
    submit = "SUBMIT(answer='Saved artifacts/revenue_by_region.csv:\\n' + r.to_string())"
    assert f"such as:\n{submit}" in told
    # The line under the last output, the one a small model follows, ends with that call too.
    last = str(requests[2]["messages"][-1]["content"])
    assert f"(Revenue by region): if the output above answers it, your code is this one line:\n{submit}\n" in last
    assert "build on the outputs above" in str(requests[1]["messages"][-1]["content"])
