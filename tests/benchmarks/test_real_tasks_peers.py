"""The quality benchmark's peer routes, against the scripted model: the gate keeps their budgets, and each
peer's run is read the way the report needs (how it ended, its answer, its calls and tokens).

The peers themselves are in the ``bench`` group (``uv sync --group bench``); without it their tests skip.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from benchmarks.real_tasks_data import TASKS, Task
from benchmarks.real_tasks_peers import PEERS, ModelGate, PeerConfig, PeerRun

from fleet_rlm.models.scripted import Reply, ScriptedModelServer

MODEL = "scripted-coder"
# rlms 0.1.3's LMHandler.stop() shuts its socket server down without closing it: a ResourceWarning of theirs.
LEAKS_ITS_SOCKET = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def chat(base_url: str) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(f"{base_url}/chat/completions", json=body, timeout=10)


def test_the_gate_counts_calls_and_tokens_and_refuses_past_the_budget() -> None:
    with ScriptedModelServer() as server:
        server.script(MODEL, Reply("one", prompt_tokens=30, completion_tokens=7), Reply("two"))
        with ModelGate(server.base_url, max_calls=2, deadline=time.monotonic() + 60) as gate:
            first, second, third = chat(gate.base_url), chat(gate.base_url), chat(gate.base_url)

    assert first.json()["choices"][0]["message"]["content"] == "one"
    assert second.status_code == 200
    assert third.status_code == 400 and "budget of 2 model calls" in third.json()["error"]["message"]
    assert (gate.calls, gate.input_tokens, gate.output_tokens) == (2, 40, 12)
    assert len(server.model.requests) == 2  # the refused call never reached the model


def test_the_gate_refuses_every_call_after_the_deadline() -> None:
    with ScriptedModelServer() as server:
        server.script(MODEL, "never sent")
        with ModelGate(server.base_url, max_calls=10, deadline=time.monotonic() - 1) as gate:
            refused = chat(gate.base_url)

    assert refused.status_code == 400 and "deadline" in refused.json()["error"]["message"]
    assert gate.calls == 0 and not server.model.requests


def run(route: str, task: Task, tmp_path: Path, *replies: str, max_iterations: int = 4) -> PeerRun:
    for path, body in task.files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(body)
    with ScriptedModelServer() as server:
        server.script(MODEL, *replies)
        config = PeerConfig(
            upstream=server.base_url,
            model=MODEL,
            api_key="local",
            temperature=0.0,
            max_tokens=256,
            max_iterations=max_iterations,
            max_model_calls=10,
            turn_timeout=60,
            wind_down=10,
        )
        return PEERS[route](config, task.text, tmp_path)


SUM_REVENUE = (
    "import csv\n"
    "totals = {}\n"
    "with open('files/sales.csv') as f:\n"
    "    for row in csv.DictReader(f):\n"
    "        totals[row['region']] = totals.get(row['region'], 0) + int(row['revenue'])\n"
)


@LEAKS_ITS_SOCKET
def test_the_reference_reads_the_files_and_saves_the_artifact_where_the_check_looks(tmp_path: Path) -> None:
    pytest.importorskip("rlm")
    task = TASKS["revenue_artifact"]()
    write = SUM_REVENUE + (
        "with open('artifacts/revenue_by_region.csv', 'w') as out:\n"
        "    out.write('region,revenue\\n' + ''.join(f'{r},{t}\\n' for r, t in totals.items()))\n"
        "print(totals)"
    )
    first = f"Sum the revenue per region.\n```repl\n{write}\n```"
    second = "Saved.\n```repl\nanswer['content'] = 'saved artifacts/revenue_by_region.csv'\nanswer['ready'] = True\n```"

    result = run("reference", task, tmp_path, first, second)

    assert (result.outcome, result.error, result.answer) == ("submitted", None, "saved artifacts/revenue_by_region.csv")
    assert (result.iterations, result.model_calls, result.input_tokens, result.output_tokens) == (2, 2, 20, 10)
    saved = (tmp_path / "artifacts" / "revenue_by_region.csv").read_text()
    assert not task.check(result.answer) and task.passes(result.answer, saved)
    assert any(line.startswith("output: {'north'") for line in result.trace)


@LEAKS_ITS_SOCKET
def test_the_reference_answer_after_its_last_iteration_is_extracted(tmp_path: Path) -> None:
    pytest.importorskip("rlm")
    task = TASKS["csv_total"]()
    probe = "Look first.\n```repl\nwith open('files/sales.csv') as f:\n    print(f.read()[:40])\n```"

    result = run("reference", task, tmp_path, probe, f"The total is {task.expected}.", max_iterations=1)

    assert (result.outcome, result.iterations, result.model_calls) == ("extracted", 2, 2)
    assert task.check(result.answer)


def test_minrlm_final_is_submitted_and_a_reply_without_code_is_its_parse_failure(tmp_path: Path) -> None:
    pytest.importorskip("minrlm")
    task = TASKS["csv_top_region"]()
    code = (
        "import csv\n"
        "totals = {}\n"
        "with open('files/orders.csv') as f:\n"
        "    for row in csv.DictReader(f):\n"
        "        totals[row['region']] = totals.get(row['region'], 0) + int(row['revenue'])\n"
        "best = max(totals, key=totals.get)\n"
        "FINAL(f'{best} {totals[best]}')"
    )

    submitted = run("minrlm", task, tmp_path, f"```python\n# REASONING: group and sum\n{code}\n```")
    no_code = run(
        "minrlm", task, tmp_path / "again", "I think the answer is probably north, but let me explain why " * 3
    )

    assert (submitted.outcome, submitted.answer, submitted.error) == ("submitted", task.expected, None)
    assert (submitted.iterations, submitted.model_calls, submitted.input_tokens) == (1, 1, 10)
    assert (no_code.outcome, no_code.parse_failures, no_code.answer) == ("failed", 1, "")
