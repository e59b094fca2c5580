from __future__ import annotations

import asyncio
import time

from fleet_rlm.models.scripted import Reply, fields_reply, rlm_step
from fleet_rlm.protocol.events import EventType

from .conftest import Harness


def test_iteration_budget_extracts_an_answer_and_says_so(harness: Harness) -> None:
    harness.server.script(
        "root",
        rlm_step("Explore.", "x = 41"),
        rlm_step("Explore more.", "x += 1\nprint(x)"),
        fields_reply(answer="x is 42"),  # DSPy's extract step after the last iteration
    )
    run = harness.run("Find x", max_iterations=2)
    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "x is 42"
    exhausted = run.of(EventType.BUDGET_EXHAUSTED)
    assert [e.data["budget"] for e in exhausted] == ["iterations"]
    assert any("iteration budget of 2" in e.data["message"] for e in run.of(EventType.WARNING))


def test_model_call_budget_counts_root_and_sub_calls(harness: Harness) -> None:
    harness.server.model.default = lambda request: "sub answer"
    harness.server.script(
        "root",
        rlm_step("Ask twice.", "print(llm_query('a'), llm_query('b'))"),
        rlm_step("Continue.", "SUBMIT(answer='too late')"),
    )
    run = harness.run("Anything", max_model_calls=3)
    assert run.outcome.status == "failed"
    assert run.outcome.error is not None and "model-call budget exhausted" in run.outcome.error
    assert run.outcome.usage["model_calls"] == 3
    assert [e.data["budget"] for e in run.of(EventType.BUDGET_EXHAUSTED)] == ["model_calls"]
    assert run.events[-1].type is EventType.TURN_FAILED


def test_turn_deadline_ends_a_long_execution(harness: Harness) -> None:
    harness.server.script("root", rlm_step("Wait forever.", "import time\ntime.sleep(60)"))
    started = time.monotonic()
    run = harness.run("Anything", turn_timeout=2.0)
    assert time.monotonic() - started < 6
    assert run.outcome.status == "failed"
    assert run.outcome.error == "turn deadline of 2s exceeded"
    assert [e.data["budget"] for e in run.of(EventType.BUDGET_EXHAUSTED)] == ["deadline"]


def test_execution_timeout_is_reported_and_the_turn_goes_on(harness: Harness) -> None:
    harness.server.script(
        "root",
        rlm_step("Spin.", "while True:\n    pass"),
        rlm_step("Give up spinning.", "SUBMIT(answer='recovered')"),
    )
    run = harness.run("Anything", execution_timeout=1.0)
    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "recovered"
    second_request = str(harness.server.model.requests_for("root")[1]["messages"])
    assert "timeout" in second_request.lower()


def test_output_is_capped_with_a_note(harness: Harness) -> None:
    harness.server.script(
        "root",
        rlm_step("Print a lot.", "print('x' * 50000)"),
        rlm_step("Done.", "SUBMIT(answer='ok')"),
    )
    run = harness.run("Anything", max_output_chars=1000)
    assert run.outcome.status == "completed"
    assert len(run.output_text()) < 1200
    assert "cut" in run.output_text() or any("cut" in e.data["message"] for e in run.of(EventType.WARNING))


def test_output_streams_before_the_execution_ends(harness: Harness) -> None:
    code = "import time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('second')\nSUBMIT(answer='ok')"
    harness.server.script("root", rlm_step("Print slowly.", code))
    run = harness.run("Anything")
    outputs = run.of(EventType.OUTPUT)
    first = next(e for e in outputs if "first" in e.data["text"])
    second = next(e for e in outputs if "second" in e.data["text"])
    assert second.ts - first.ts >= 1.0


def test_cancel_kills_running_code_within_a_second(harness: Harness) -> None:
    harness.server.script("root", rlm_step("Sleep.", "import time\nprint('started', flush=True)\ntime.sleep(60)"))
    turn, events = harness.build("Anything")

    async def scenario() -> float:
        task = asyncio.ensure_future(turn.run())
        while not any(e.type is EventType.OUTPUT for e in events):
            await asyncio.sleep(0.05)
        asked = time.monotonic()
        turn.cancel()
        outcome = await task
        assert outcome.status == "cancelled"
        return time.monotonic() - asked

    assert asyncio.run(scenario()) < 1.0
    assert events[-1].type is EventType.TURN_CANCELLED
    assert sum(e.terminal for e in events) == 1


def test_cancel_stops_the_wait_on_the_model(harness: Harness) -> None:
    harness.server.script("root", Reply(text="never read", delay=30))
    turn, events = harness.build("Anything")

    async def scenario() -> float:
        task = asyncio.ensure_future(turn.run())
        await asyncio.sleep(0.5)
        asked = time.monotonic()
        turn.cancel()
        await task
        return time.monotonic() - asked

    assert asyncio.run(scenario()) < 1.0
    assert events[-1].type is EventType.TURN_CANCELLED


def test_token_ceiling_is_checked_before_each_model_call(harness: Harness) -> None:
    # Every scripted reply reports 10 prompt + 5 completion tokens.
    harness.server.script("root", *(rlm_step(f"Step {i}.", f"x = {i}") for i in range(4)))
    run = harness.run("Anything", max_tokens_per_turn=20)
    assert run.outcome.status == "failed"
    assert run.outcome.error == "token budget exhausted: 30 of 20 tokens used"
    assert run.outcome.usage["model_calls"] == 2
    assert [e.data["budget"] for e in run.of(EventType.BUDGET_EXHAUSTED)] == ["tokens"]


def test_cost_ceiling_uses_configured_prices(harness: Harness) -> None:
    harness.server.script("root", *(rlm_step(f"Step {i}.", f"x = {i}") for i in range(4)))
    # $1 per input token and nothing per output token: each call costs $10.
    run = harness.run("Anything", max_cost_per_turn=15.0, model_prices={"openai/root": (1_000_000.0, 0.0)})
    assert run.outcome.status == "failed"
    assert run.outcome.error == "cost budget exhausted: 20.0000 of 15 spent"
    assert run.outcome.usage["model_calls"] == 2
