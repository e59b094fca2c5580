from __future__ import annotations

import asyncio
import csv
import io
import time

from fleet_rlm.models.scripted import fields_reply, rlm_step
from fleet_rlm.protocol.events import TERMINAL_TYPES, EventType

from .conftest import Harness

SALES = "region,quarter,revenue\nnorth,Q1,100\nsouth,Q1,80\nnorth,Q2,70\nsouth,Q2,120\neast,Q2,5\n"

READ_AND_SUM = """import csv
rows = list(csv.DictReader(open('files/sales.csv')))
totals = {}
for row in rows:
    totals[row['region']] = totals.get(row['region'], 0) + int(row['revenue'])
print(totals)"""

SAVE_AND_SUBMIT = """with open('artifacts/revenue_by_region.csv', 'w') as f:
    f.write('region,revenue\\n')
    for region in sorted(totals):
        f.write(f'{region},{totals[region]}\\n')
SUBMIT(answer=', '.join(f'{r}: {t}' for r, t in sorted(totals.items())))"""


def test_csv_turn_computes_totals_and_writes_artifact(harness: Harness) -> None:
    harness.server.script(
        "root", rlm_step("Look at the sales data.", READ_AND_SUM), rlm_step("Save it.", SAVE_AND_SUBMIT)
    )
    run = harness.run("Revenue by region; save artifacts/revenue_by_region.csv", {"sales.csv": SALES})

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "east: 5, north: 170, south: 200"
    artifact = run.workspace / "artifacts" / "revenue_by_region.csv"
    rows = list(csv.DictReader(io.StringIO(artifact.read_text())))
    assert {r["region"]: int(r["revenue"]) for r in rows} == {"east": 5, "north": 170, "south": 200}
    assert [a["path"] for a in run.outcome.artifacts] == ["artifacts/revenue_by_region.csv"]
    assert run.outcome.artifacts[0]["size"] == artifact.stat().st_size

    assert "{'north': 170, 'south': 200, 'east': 5}" in run.output_text()
    assert [e.data["path"] for e in run.of(EventType.ARTIFACT_CREATED)] == ["artifacts/revenue_by_region.csv"]
    assert run.outcome.usage["root_calls"] == 2
    assert run.outcome.usage["iterations"] == 2


def test_event_stream_shape(harness: Harness) -> None:
    harness.server.script("root", rlm_step("Look.", READ_AND_SUM), rlm_step("Done.", SAVE_AND_SUBMIT))
    run = harness.run("Revenue by region", {"sales.csv": SALES})

    seqs = [e.seq for e in run.events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert run.events[0].type is EventType.TURN_STARTED
    assert [e.type for e in run.events if e.type in TERMINAL_TYPES] == [EventType.TURN_COMPLETED]
    assert run.events[-1].type is EventType.TURN_COMPLETED
    root = run.events[0].span_id
    iterations = run.of(EventType.ITERATION_STARTED)
    assert [e.data["iteration"] for e in iterations] == [1, 2]
    assert all(e.parent_span_id == root for e in iterations)
    first_iteration = iterations[0].span_id
    code_events = [e for e in run.of(EventType.CODE) if e.span_id == first_iteration]
    assert code_events and "csv.DictReader" in code_events[0].data["code"]
    assert run.of(EventType.REASONING)[0].data["text"] == "Look."
    # The root model streams: reasoning and code arrive in pieces before the full events.
    deltas = run.of(EventType.REASONING_DELTA) + run.of(EventType.CODE_DELTA)
    assert deltas and min(e.seq for e in deltas) < code_events[0].seq
    code_text = "".join(str(e.data["text"]) for e in run.of(EventType.CODE_DELTA) if e.span_id == first_iteration)
    assert "csv.DictReader" in code_text
    for event in run.events:
        assert set(event.to_dict()) == {"type", "seq", "turn_id", "ts", "span_id", "parent_span_id", "data"}


def test_model_recovers_from_a_code_error(harness: Harness) -> None:
    harness.server.script(
        "root",
        rlm_step("Try a column that does not exist.", "print(undefined_name)"),
        rlm_step("Fix it.", "SUBMIT(answer='fixed')"),
    )
    run = harness.run("Anything")
    assert run.outcome.status == "completed"
    assert run.outcome.answer == "fixed"
    assert run.outcome.usage["sandbox_errors"] == 1
    second_request = harness.server.model.requests_for("root")[1]
    assert "NameError" in str(second_request["messages"])


def test_submit_with_missing_field_is_reported_to_the_model(harness: Harness) -> None:
    harness.server.script(
        "root",
        rlm_step("Submit the wrong field.", "SUBMIT(result='x')"),
        rlm_step("Submit properly.", "SUBMIT(answer='right')"),
    )
    run = harness.run("Anything")
    assert run.outcome.answer == "right"
    second_request = str(harness.server.model.requests_for("root")[1]["messages"])
    assert "SUBMIT" in second_request and "answer" in second_request


def test_llm_query_batched_answers_every_prompt_in_order(harness: Harness) -> None:
    harness.server.model.default = lambda request: "echo:" + str(request["messages"][-1]["content"])[-3:]
    code = "answers = llm_query_batched([f'q{i:02d}' for i in range(8)])\nSUBMIT(answer='|'.join(answers))"
    harness.server.script("root", rlm_step("Fan out.", code))
    run = harness.run("Anything")
    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "|".join(f"echo:q{i:02d}" for i in range(8))
    assert run.outcome.usage["sub_calls"] == 8
    tool_names = [e.data["name"] for e in run.of(EventType.TOOL_FINISHED)]
    assert "llm_query_batched" in tool_names


def test_dspy_sub_agents_in_sandbox_code_use_the_sub_model_on_the_turn_budget(harness: Harness) -> None:
    code = "import dspy\nguess = dspy.Predict('question -> answer')(question='six times seven?').answer\nSUBMIT(answer=guess)"
    harness.server.script("root", rlm_step("Use a sub-agent.", code))
    harness.server.script("sub", fields_reply(answer="42"))
    run = harness.run("Anything")
    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "42"
    assert run.outcome.usage["sub_calls"] == 1


def test_more_concurrent_streaming_turns_than_dspy_worker_tokens(harness: Harness) -> None:
    """DSPy's asyncify shares one 8-token thread limiter between event loops; each turn streams on its
    own loop, so the engine must not go through it or the ninth concurrent turn never wakes."""

    def slow_answer(request: object) -> str:
        time.sleep(0.3)  # every turn is mid-stream at the same time
        return rlm_step("Answer.", "SUBMIT(answer='ok')")

    harness.server.model.default = slow_answer
    turns = [harness.build(f"turn {i}")[0] for i in range(12)]

    async def run_all() -> list[str]:
        outcomes = await asyncio.wait_for(asyncio.gather(*(turn.run() for turn in turns)), timeout=60)
        return [outcome.status for outcome in outcomes]

    assert asyncio.run(run_all()) == ["completed"] * 12
