from __future__ import annotations

import asyncio
import json
import time

from fleet_rlm.models.scripted import Reply, rlm_step, task_of
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.testing.processes import live_sandbox_pids
from fleet_rlm.workspace.hashing import hash_file

from .conftest import Harness

FAN_OUT = """results = spawn_agents([{'task': f'child task {i}'} for i in range(8)])
for r in results:
    print(r['status'], r['answer'], r['error'])
SUBMIT(answer=' | '.join(str(r['answer']) for r in results))"""


def child_step(i: int, *, sleep: float = 0.0, code: str | None = None) -> str:
    body = code or f"import time\ntime.sleep({sleep})\nSUBMIT(answer='child {i} done')"
    return rlm_step(f"Child {i} works.", body)


def max_overlap(events: list[Event]) -> int:
    marks = sorted(
        [(e.ts, 1) for e in events if e.type is EventType.CHILD_STARTED]
        + [(e.ts, -1) for e in events if e.type is EventType.CHILD_FINISHED]
    )
    running = peak = 0
    for _, delta in marks:
        running += delta
        peak = max(peak, running)
    return peak


def test_fan_out_of_eight_children_with_concurrency_four(harness: Harness) -> None:
    harness.server.script_for_task("root", "PARENT", rlm_step("Fan out.", FAN_OUT))
    for i in range(8):
        harness.server.script_for_task("root", f"child task {i}", child_step(i, sleep=0.4))
    run = harness.run("PARENT fan out", max_concurrent_children=4)

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == " | ".join(f"child {i} done" for i in range(8))
    started = run.of(EventType.CHILD_STARTED)
    finished = run.of(EventType.CHILD_FINISHED)
    assert len(started) == len(finished) == 8
    assert {e.data["outcome"] for e in finished} == {"completed"}
    assert 2 <= max_overlap(run.events) <= 4
    # Every event of a child hangs in the child's own subtree.
    child_spans = {e.span_id for e in started}
    iterations_of_children = [e for e in run.of(EventType.ITERATION_STARTED) if e.parent_span_id in child_spans]
    assert len(iterations_of_children) == 8
    assert all(e.data["depth"] == 1 for e in started)
    assert run.outcome.usage["children"] == 8
    assert run.outcome.usage["child_calls"] == 8


def test_a_failing_child_returns_an_error_in_its_slot(harness: Harness) -> None:
    code = """results = spawn_agents([{'task': 'child ok'}, {'task': 'child broken'}])
print([r['status'] for r in results])
SUBMIT(answer=f"{results[0]['answer']} / {results[1]['status']}: {results[1]['error']}")"""
    harness.server.script_for_task("root", "PARENT", rlm_step("Two children.", code))
    harness.server.script_for_task("root", "child ok", child_step(0))
    harness.server.script_for_task("root", "child broken", Reply(status=500, text="model exploded"))
    run = harness.run("PARENT two children")

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer is not None
    assert run.outcome.answer.startswith("child 0 done / failed: ")
    outcomes = {e.data["task"]: e.data["outcome"] for e in run.of(EventType.CHILD_FINISHED)}
    assert outcomes == {"child ok": "completed", "child broken": "failed"}


def test_depth_limit_withholds_delegation_from_the_deepest_child(harness: Harness) -> None:
    parent = "r = spawn_agent('child deep')\nSUBMIT(answer=str(r['answer']))"
    harness.server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    harness.server.script_for_task(
        "root",
        "child deep",
        rlm_step("Try to delegate further.", "spawn_agent('grandchild')"),
        rlm_step("Cannot; answer myself.", "SUBMIT(answer='answered without grandchildren')"),
    )
    run = harness.run("PARENT deep", max_depth=1)

    assert run.outcome.answer == "answered without grandchildren"
    assert [e.data["depth"] for e in run.of(EventType.CHILD_STARTED)] == [1]
    child_requests = [r for r in harness.server.model.requests if task_of(r) == "child deep"]
    assert "spawn_agent" not in str(child_requests[0]["messages"][0]["content"])
    assert "NameError" in str(child_requests[1]["messages"])


def test_shared_model_call_budget_runs_out_across_siblings(harness: Harness) -> None:
    code = """results = spawn_agents([{'task': f'sibling {i}'} for i in range(4)])
print(sorted(r['status'] for r in results))
print([r['error'] for r in results if r['error']])"""
    harness.server.script_for_task("root", "PARENT", rlm_step("Four siblings.", code))
    for i in range(4):
        harness.server.script_for_task("root", f"sibling {i}", child_step(i))
    run = harness.run("PARENT siblings", max_model_calls=4)

    assert "['completed', 'completed', 'completed', 'failed']" in run.output_text()
    assert "model-call budget exhausted" in run.output_text()
    assert run.outcome.status == "failed"
    assert run.outcome.usage["model_calls"] == 4


def test_child_artifacts_are_promoted_with_provenance(harness: Harness) -> None:
    parent = """r = spawn_agent('child writer', files=['files/input.txt'])
print(r['artifacts'])
SUBMIT(answer=r['child_id'])"""
    child = """text = open('files/input.txt').read()
open('artifacts/upper.txt', 'w').write(text.upper())
SUBMIT(answer='written')"""
    harness.server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    harness.server.script_for_task("root", "child writer", rlm_step("Write.", child))
    run = harness.run("PARENT artifacts", {"input.txt": "hello child"})

    assert run.outcome.status == "completed", run.outcome.error
    child_id = run.outcome.answer
    promoted = run.workspace / "artifacts" / "children" / str(child_id) / "upper.txt"
    assert promoted.read_text() == "HELLO CHILD"
    provenance = json.loads((promoted.parent / "provenance.json").read_text())
    assert provenance[0]["child_id"] == child_id
    assert provenance[0]["parent_turn"] == run.events[0].turn_id
    assert provenance[0]["task"] == "child writer"
    assert provenance[0]["source_path"] == "artifacts/upper.txt"
    assert provenance[0]["sha256"] == hash_file(promoted).sha256
    paths = [a["path"] for a in run.outcome.artifacts]
    assert f"artifacts/children/{child_id}/upper.txt" in paths


def test_a_sparse_child_artifact_is_not_promoted_and_is_named(harness: Harness) -> None:
    parent = """r = spawn_agent('child writer')
print(r['artifacts'])
SUBMIT(answer=r['child_id'])"""
    child = """with open('artifacts/sparse.bin', 'wb') as out:
    out.write(b'head')
    out.truncate(256 * 1024 * 1024)
open('artifacts/notes.txt', 'w').write('notes')
SUBMIT(answer='written')"""
    harness.server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    harness.server.script_for_task("root", "child writer", rlm_step("Write.", child))
    run = harness.run("PARENT sparse")

    assert run.outcome.status == "completed", run.outcome.error
    promoted = run.workspace / "artifacts" / "children" / str(run.outcome.answer)
    assert (promoted / "notes.txt").read_text() == "notes"
    assert not (promoted / "sparse.bin").exists()
    assert [entry["source_path"] for entry in json.loads((promoted / "provenance.json").read_text())] == [
        "artifacts/notes.txt"
    ]
    told = [e.data["message"] for e in run.events if e.type is EventType.WARNING]
    assert any(m.startswith("artifacts/sparse.bin was not copied out of the sandbox: it is sparse") for m in told)


def test_cancel_during_fan_out_reaches_every_child_and_leaks_nothing(harness: Harness) -> None:
    before = live_sandbox_pids(harness.tmp)
    harness.server.script_for_task("root", "PARENT", rlm_step("Fan out.", FAN_OUT))
    for i in range(8):
        harness.server.script_for_task("root", f"child task {i}", child_step(i, sleep=60))
    turn, events = harness.build("PARENT cancel me", max_concurrent_children=4)

    async def scenario() -> float:
        task = asyncio.ensure_future(turn.run())
        while sum(e.type is EventType.ITERATION_STARTED for e in events) < 5:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        asked = time.monotonic()
        turn.cancel()
        outcome = await task
        assert outcome.status == "cancelled"
        return time.monotonic() - asked

    assert asyncio.run(scenario()) < 1.0
    deadline = time.monotonic() + 5
    while live_sandbox_pids(harness.tmp) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_sandbox_pids(harness.tmp) - before == set()


def test_no_sandbox_processes_left_after_failing_and_timed_out_children(harness: Harness) -> None:
    before = live_sandbox_pids(harness.tmp)
    code = """results = spawn_agents([{'task': 'slow child'}, {'task': 'bad child'}, {'task': 'bad file', 'files': ['../etc/passwd']}])
print([r['status'] for r in results])
SUBMIT(answer=','.join(r['status'] for r in results))"""
    harness.server.script_for_task("root", "PARENT", rlm_step("Mixed children.", code))
    harness.server.script_for_task("root", "slow child", child_step(0, sleep=30))
    harness.server.script_for_task("root", "bad child", child_step(1, code="raise SystemExit(3)"), Reply(status=500))
    run = harness.run("PARENT mixed", child_timeout=2.0)

    assert run.outcome.answer == "timeout,failed,failed"
    deadline = time.monotonic() + 5
    while live_sandbox_pids(harness.tmp) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_sandbox_pids(harness.tmp) - before == set()


def test_children_per_turn_are_capped_with_a_readable_refusal(harness: Harness) -> None:
    code = """results = spawn_agents([{'task': f'capped {i}'} for i in range(3)])
print(sorted(r['status'] for r in results))
print([r['error'] for r in results if r['status'] == 'refused'])
SUBMIT(answer='ok')"""
    harness.server.script_for_task("root", "PARENT", rlm_step("Three children.", code))
    for i in range(3):
        harness.server.script_for_task("root", f"capped {i}", child_step(i))
    run = harness.run("PARENT capped", max_children_per_turn=2)

    assert run.outcome.status == "completed", run.outcome.error
    assert "['completed', 'completed', 'refused']" in run.output_text()
    assert "child-agent limit reached: 2 per turn" in run.output_text()
    assert len(run.of(EventType.CHILD_STARTED)) == 2


def test_a_child_whose_code_never_read_a_file_its_task_names_is_unverified(harness: Harness) -> None:
    parent = (
        "r = spawn_agent('CHILD add files/a.csv and files/b.csv', files=['files/a.csv', 'files/b.csv'])\n"
        "SUBMIT(answer=f\"{r['answer_source']} {r['unverified']}: {r['unverified_reason']}\")"
    )
    harness.server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    harness.server.script_for_task(
        "root", "CHILD", rlm_step("Only one.", "SUBMIT(answer=open('files/a.csv').read().strip())")
    )
    run = harness.run("PARENT delegate", files={"a.csv": "1\n", "b.csv": "2\n"})

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == (
        "submitted True: the task names 'files/b.csv', which no code of this turn read, so the answer cannot "
        "have used it"
    )
