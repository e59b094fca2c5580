"""A reply the model writes outside DSPy's field format, and work it repeats instead of submitting:
neither ends the turn ``failed``. Exact behaviour against the scripted model."""

from __future__ import annotations

import json
from typing import Any

from fleet_rlm.models.scripted import fields_reply, rlm_step
from fleet_rlm.protocol.events import EventType
from fleet_rlm.testing.turn_events import event_problems

from .conftest import Harness

MALFORMED = "The total is easy: I would sum the amount column and print it."


def prompt_text(request: dict[str, Any]) -> str:
    return json.dumps(request.get("messages"))


def is_extract(request: dict[str, Any]) -> bool:
    return "extract the final outputs now" in prompt_text(request)


def warnings_of(run: Any) -> list[str]:
    return [str(e.data["message"]) for e in run.of(EventType.WARNING)]


def test_a_reply_that_does_not_parse_is_told_the_format_and_the_turn_goes_on(harness: Harness) -> None:
    good = rlm_step("Submit.", "SUBMIT(answer=str(6 * 7))")
    replies = iter([MALFORMED])

    def root(request: dict[str, Any]) -> str:
        # Malformed until the model has been told the format (DSPy may first retry in JSON itself).
        if "[Fleet] Your last reply could not be read" in prompt_text(request):
            return good
        return next(replies, MALFORMED)

    harness.server.model.default = root
    run = harness.run("Multiply six by seven")

    assert run.outcome.status == "completed", run.outcome.error
    assert (run.outcome.answer, run.outcome.answer_source, run.outcome.unverified) == ("42", "submitted", False)
    [told] = [w for w in warnings_of(run) if "did not follow the format" in w]
    assert "missing reasoning, code" in told
    last = prompt_text(harness.server.model.requests_for("root")[-1])
    assert "Your reply began: The total is easy" in last
    assert "[[ ## reasoning ## ]]" in last and "[[ ## code ## ]]" in last and "[[ ## completed ## ]]" in last
    assert event_problems([e.to_dict() for e in run.events]) == []


def test_replies_that_never_parse_end_through_the_extract_step_with_the_work_so_far(harness: Harness) -> None:
    first = rlm_step("Sum.", "print(sum([29000, 342]))")
    asked: list[str] = []

    def root(request: dict[str, Any]) -> str:
        if is_extract(request):
            asked.append("extract")
            return fields_reply(answer="The total is 29342.")
        if not asked and len(harness.server.model.requests_for("root")) == 1:
            return first
        return MALFORMED

    harness.server.model.default = root
    run = harness.run("Total?", max_iterations=20)

    assert run.outcome.status == "completed", run.outcome.error
    assert (run.outcome.answer, run.outcome.answer_source) == ("The total is 29342.", "extracted")
    assert "4 replies of the model in a row could not be read" in str(run.outcome.unverified_reason)
    assert run.outcome.unverified
    assert run.outcome.usage["iterations"] == 5  # one that ran, four that could not be read; not 20
    assert not run.of(EventType.BUDGET_EXHAUSTED)  # the budget did not run out
    assert asked == ["extract"]


def test_replies_that_never_parse_with_nothing_computed_end_incomplete(harness: Harness) -> None:
    harness.server.model.default = lambda request: fields_reply(answer="made up") if is_extract(request) else MALFORMED
    run = harness.run("Total?", max_iterations=20)

    assert run.outcome.status == "incomplete"
    assert run.outcome.error == "4 replies of the model in a row could not be read and no code ran successfully"
    assert str(run.outcome.answer).startswith("I could not compute the result:")
    assert not any(is_extract(r) for r in harness.server.model.requests_for("root"))


def test_the_same_code_with_no_output_writing_the_same_file_ends_through_the_extract_step(harness: Harness) -> None:
    """Seen with a real 1.5B model on the README's job: the right artifact at iteration 1, then the same
    code (printing nothing) until the budget ran out and the turn failed at its deadline."""
    write = rlm_step(
        "This is the first interaction; compute and save.",
        "import csv\nrows = list(csv.DictReader(open('files/sales.csv')))\n"
        "open('artifacts/revenue_by_region.csv', 'w').write('region,revenue\\nnorth,3\\n')",
    )

    def root(request: dict[str, Any]) -> str:
        return (
            fields_reply(answer="north: 3, saved to artifacts/revenue_by_region.csv") if is_extract(request) else write
        )

    harness.server.model.default = root
    run = harness.run("Revenue by region, saved", files={"sales.csv": "region,amount\nnorth,3\n"}, max_iterations=20)

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer_source == "extracted" and run.outcome.unverified
    assert "the same work was done 4 times (the same output, the same files written)" in str(
        run.outcome.unverified_reason
    )
    assert run.outcome.usage["iterations"] == 4
    # What the work wrote, printed in the sandbox, is in front of the extract step and is the evidence.
    [extract] = [r for r in harness.server.model.requests_for("root") if is_extract(r)]
    assert "--- artifacts/revenue_by_region.csv ---" in prompt_text(extract)
    assert "north,3" in prompt_text(extract)
    assert "north,3" in run.outcome.evidence
    assert [a["path"] for a in run.outcome.artifacts] == ["artifacts/revenue_by_region.csv"]
    requests = [r for r in harness.server.model.requests_for("root") if not is_extract(r)]
    assert "[Fleet] This is the same output, with the same files written, for the second time" in prompt_text(
        requests[2]
    )


def test_the_same_code_writing_a_new_file_each_time_is_not_repeated_work(harness: Harness) -> None:
    counter = {"n": 0}

    def root(request: dict[str, Any]) -> str:
        counter["n"] += 1
        if counter["n"] > 5:
            return rlm_step("Done.", "SUBMIT(answer='written')")
        return rlm_step(
            "Write.", "import os\nopen(f'artifacts/part{len(os.listdir(\"artifacts\"))}.txt', 'w').write('x')"
        )

    harness.server.model.default = root
    run = harness.run("Write parts", max_iterations=20)

    assert (run.outcome.status, run.outcome.answer_source) == ("completed", "submitted")
    assert len(run.outcome.artifacts) == 5
