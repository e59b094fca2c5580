"""How the root model is asked for its replies and how they are read: its earlier iterations as a
conversation, and, where the endpoint honours one, a JSON schema its replies follow (other models keep
the chat format). Exact behaviour against the scripted model."""

from __future__ import annotations

from typing import Any

import pytest

from fleet_rlm.engine.adapters import escaped_string_newlines
from fleet_rlm.models.scripted import json_reply, rlm_step
from fleet_rlm.protocol.events import EventType

from .conftest import Harness

SALES = "region,revenue\nnorth,100\nsouth,80\nnorth,70\n"

SUM = """import csv
totals = {}
for row in csv.DictReader(open('files/sales.csv')):
    totals[row['region']] = totals.get(row['region'], 0) + int(row['revenue'])
print(totals)
print(llm_query('Name the biggest region: ' + str(totals)))"""

PROBE_ANSWER = json_reply(ok=True)


def schema_of(request: dict[str, Any]) -> dict[str, Any]:
    form = request["response_format"]
    assert form["type"] == "json_schema" and form["json_schema"]["strict"] is True
    return dict(form["json_schema"]["schema"])


def test_the_root_models_replies_follow_the_schema_it_is_sent_and_stream(harness: Harness) -> None:
    harness.server.model.json_schema = "honour"
    harness.server.script(
        "root",
        PROBE_ANSWER,
        json_reply(reasoning="Sum by region.", code=f"```python\n{SUM}\n```"),
        json_reply(reasoning="Submit the totals.", code="SUBMIT(answer=f\"north {totals['north']}\")"),
    )
    harness.server.script("sub", "north")
    run = harness.run("Revenue by region", {"sales.csv": SALES})

    assert run.outcome.status == "completed", run.outcome.error
    assert (run.outcome.answer, run.outcome.answer_source, run.outcome.unverified) == ("north 170", "submitted", False)
    assert "{'north': 170, 'south': 80}" in run.output_text()
    _probe, *calls = harness.server.model.requests_for("root")
    assert len(calls) == 2
    for call in calls:
        schema = schema_of(call)
        assert schema["required"] == ["reasoning", "code"] and schema["additionalProperties"] is False
    # llm_query's model was never asked for a schema.
    (sub,) = harness.server.model.requests_for("sub")
    assert "response_format" not in sub
    # The deltas carry the fields' text, not their JSON (no quotes, no escapes, no next key).
    streamed = "".join(str(e.data["text"]) for e in run.of(EventType.REASONING_DELTA))
    assert streamed == "Sum by region.Submit the totals."
    code = "".join(str(e.data["text"]) for e in run.of(EventType.CODE_DELTA))
    assert code == f"```python\n{SUM}\n```" + "SUBMIT(answer=f\"north {totals['north']}\")"
    assert [e.data["text"] for e in run.of(EventType.REASONING)] == ["Sum by region.", "Submit the totals."]


def test_a_reply_cut_short_is_told_the_json_layout_and_the_turn_goes_on(harness: Harness) -> None:
    cut = '{"reasoning": "Sum the numbers and print the re'  # a reply that ran into max_tokens

    def root(request: dict[str, Any]) -> str:
        if "[Fleet] Your last reply could not be read" in str(request["messages"]):
            return json_reply(reasoning="Submit.", code="SUBMIT(answer=str(6 * 7))")
        return cut

    harness.server.model.default = root
    # A cut reply breaks the schema, which a server checking every reply would not let through.
    harness.server.model.json_schema = "ignore"
    run = harness.run("Multiply six by seven", lm_structured_output="json_schema")

    assert run.outcome.status == "completed", run.outcome.error
    assert (run.outcome.answer, run.outcome.answer_source) == ("42", "submitted")
    told = str(harness.server.model.requests_for("root")[-1]["messages"])
    assert "as one JSON object with these fields" in told and '{"reasoning": "<your reasoning>"' in told
    assert any("did not follow the format" in str(e.data["message"]) for e in run.of(EventType.WARNING))


def test_an_endpoint_that_refuses_the_schema_gets_the_chat_format(harness: Harness) -> None:
    harness.server.script("root", rlm_step("Submit.", "SUBMIT(answer='ok')"))
    run = harness.run("Say ok")

    assert (run.outcome.status, run.outcome.answer) == ("completed", "ok")
    (call,) = harness.server.model.requests_for("root")
    assert "response_format" not in call


def test_each_earlier_iteration_is_the_models_own_message_followed_by_its_output(harness: Harness) -> None:
    """A 1.5B model shown its earlier iterations as one block of text wrote its first step again at every
    iteration; as a conversation it goes on from where it was."""
    harness.server.script(
        "root",
        rlm_step("Look at the data.", "print(open('files/sales.csv').read().splitlines()[0])"),
        rlm_step("Count the rows.", "print(len(open('files/sales.csv').read().splitlines()) - 1)"),
        rlm_step("Submit.", "SUBMIT(answer='3 rows')"),
    )
    run = harness.run("How many rows?", {"sales.csv": SALES}, max_iterations=5)

    assert (run.outcome.status, run.outcome.answer) == ("completed", "3 rows")
    third = harness.server.model.requests_for("root")[2]["messages"]
    assert [m["role"] for m in third] == ["system", "user", "assistant", "user", "assistant", "user"]
    first, step1, out1, step2, out2 = (m["content"] for m in third[1:])
    assert "You have not interacted with the REPL environment yet." in first and "1/5" in first
    assert "Variable: `task`" in first and "Variable: `task`" not in out2
    assert step1.startswith("[[ ## reasoning ## ]]\nLook at the data.") and "splitlines()[0])\n```" in step1
    assert out1.startswith("Output (14 chars):\nregion,revenue\n") and out1.endswith("[[ ## iteration ## ]]\n2/5")
    assert "Count the rows." in step2
    assert out2.startswith("Output (1 chars):\n3\n") and "[[ ## iteration ## ]]\n3/5" in out2
    assert out2.endswith("then ending with the marker for `[[ ## completed ## ]]`.")
    # The current request restates the task, which a small model otherwise loses sight of.
    assert "Your next step toward the task (How many rows?): build on the outputs above" in out2
    assert "Your next step" not in out1


def test_a_line_break_json_put_inside_a_string_literal_is_an_escape_again(harness: Harness) -> None:
    """Seen with a real 1.5B model: ``split('\\n')`` written in JSON as ``split('\n')`` reaches the sandbox as
    a line break inside the literal, and the code never compiled (four SyntaxErrors in a row)."""
    harness.server.model.json_schema = "honour"
    broken = "rows = open('files/sales.csv').read().split('\n')\nprint(len([r for r in rows if r]) - 1)"
    harness.server.script(
        "root",
        PROBE_ANSWER,
        json_reply(reasoning="Count the rows.", code=broken),
        json_reply(reasoning="Submit.", code="SUBMIT(answer='3 rows')"),
    )
    run = harness.run("How many rows?", {"sales.csv": SALES})

    assert (run.outcome.status, run.outcome.answer) == ("completed", "3 rows")
    assert run.output_text().strip() == "3"
    assert not run.of(EventType.EXECUTION_FAILED)


@pytest.mark.parametrize(
    "code",
    ["print('a')\nprint('b')", 's = """two\nlines"""', "x = (1,\n2)", "print(x", "```python\nprint(1)\n```"],
)
def test_code_that_compiles_or_fails_for_another_reason_is_left_as_written(code: str) -> None:
    assert escaped_string_newlines(code) == code
