"""The evidence of an answer: which printed lines support it, picked from output of code that ran."""

from __future__ import annotations

from fleet_rlm.engine.evidence import MAX_LINE_CHARS, MAX_LINES, PrintedOutputs, pick_evidence
from fleet_rlm.models.scripted import fields_reply, rlm_step
from fleet_rlm.protocol.events import EventType

from .conftest import Harness


def test_figures_are_compared_as_numbers_whatever_their_separators_or_decimals() -> None:
    outputs = ["loading sales.csv\nnorth 29342.0\n", "region,total\nnorth,29342.0\nsouth,468.25\nwest,12\n"]
    evidence = pick_evidence(outputs, "1. North took **29,342**\n2. South took 468.25")
    # The newest line stating each figure, in the order printed; the list markers 1 and 2 are not figures.
    assert evidence.lines == ["north,29342.0", "south,468.25"]
    assert (evidence.stated, evidence.found, evidence.missing) == ([29342.0, 468.25], [29342.0, 468.25], [])


def test_a_printed_figure_with_more_decimals_supports_the_rounded_one_in_the_answer() -> None:
    assert pick_evidence(["mean 97.1493\n"], "The mean is 97.15.").lines == ["mean 97.1493"]
    assert pick_evidence(["mean 97.1493\n"], "The mean is 97.2.").missing == [97.2]


def test_names_the_answer_states_find_lines_when_it_states_no_figures() -> None:
    outputs = ["cities: 2\nLisbon 545000\nPorto 232000\n"]
    evidence = pick_evidence(outputs, "Lisbon has the larger population.")
    assert (evidence.lines, evidence.stated) == (["Lisbon 545000"], [])


def test_figures_no_output_states_are_missing_and_give_no_lines() -> None:
    evidence = pick_evidence(["the total is 41\n"], "The total is 42.")
    assert (evidence.lines, evidence.found, evidence.missing) == ([], [], [42.0])


def test_output_of_an_execution_that_failed_never_counts() -> None:
    printed = PrintedOutputs()
    printed.printed(1, "partial total 42\n")  # iteration 1 failed: no success was recorded for it
    printed.printed(2, "total 7\n")
    printed.succeeded(2)
    printed.printed(0, "setup 42\n")  # DSPy's own setup code, before the first iteration
    assert printed.executions() == ["total 7\n"]
    assert pick_evidence(printed.executions(), "The total is 42.").lines == []


def test_a_flood_of_output_keeps_evidence_bounded() -> None:
    printed = PrintedOutputs()
    for iteration in range(1, 200):
        printed.printed(iteration, "".join(f"row {n} value {n}\n" for n in range(5_000)))
        printed.printed(iteration, "x" * 1_000_000 + " 42 " + "y" * 1_000_000 + "\n")
        printed.succeeded(iteration)
    answer = " ".join(str(n) for n in range(100)) + " " + " ".join(f"name{n}" for n in range(100))
    evidence = pick_evidence(printed.executions(), answer)
    assert len(evidence.lines) == MAX_LINES
    assert all(len(line) <= MAX_LINE_CHARS for line in evidence.lines)
    assert sum(len(text) for text in printed.executions()) <= 32 * 20_000


def test_a_long_line_is_cut_around_the_figure_it_supports() -> None:
    [line] = pick_evidence(["x" * 500 + " total=42 " + "y" * 500], "It is 42.").lines
    assert len(line) <= MAX_LINE_CHARS and "total=42" in line and line.startswith("...") and line.endswith("...")


def test_a_submitted_answer_carries_the_printed_line_that_states_its_figure(harness: Harness) -> None:
    code = "total = 29342\nprint('rows read: 3')\nprint(f'north total: {total:,}')\nSUBMIT(answer=f'North: {total}')"
    harness.server.script("root", rlm_step("Sum it.", code))
    run = harness.run("Total for north")
    assert (run.outcome.answer, run.outcome.unverified) == ("North: 29342", False)
    assert run.outcome.evidence == ["north total: 29,342"]
    assert run.of(EventType.TURN_COMPLETED)[0].data["evidence"] == ["north total: 29,342"]


def test_an_extracted_answer_says_whether_output_of_code_that_ran_states_its_figures(harness: Harness) -> None:
    harness.server.script("root", rlm_step("Look.", "print('sum:', sum([1, 2, 3]))"), fields_reply(answer="It is 6."))
    supported = harness.run("Total", max_iterations=1)
    completed = supported.of(EventType.TURN_COMPLETED)[0].data
    assert (completed["unverified"], completed["evidence"]) == (True, ["sum: 6"])
    assert completed["unverified_reason"].endswith(
        "the figures it states appear in the output of code that ran (see evidence)"
    )


def test_an_extracted_answer_no_output_supports_has_no_evidence_and_says_so(harness: Harness) -> None:
    steps = [rlm_step("Fail.", "print('total 702')\n1/0"), rlm_step("Look.", "print('rows: 3')")]
    harness.server.script("root", *steps, fields_reply(answer="The total is 702."))
    run = harness.run("Total", max_iterations=2)
    completed = run.of(EventType.TURN_COMPLETED)[0].data
    # 702 was printed only by code that failed: it is no evidence.
    assert (completed["unverified"], completed["evidence"]) == (True, [])
    assert completed["unverified_reason"].endswith("and no output of code that ran states its figures")
    assert "not checked by running code" in completed["unverified_reason"]
