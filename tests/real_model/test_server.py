"""The real model's server: it answers the OpenAI chat API under Fleet's model name, and no server outlives
the code or the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from fleet_rlm.models.local import SMALL, RealModelServer
from fleet_rlm.models.local.server import PACE_WRITTEN_TOKENS
from fleet_rlm.models.local.speed import Speed
from fleet_rlm.processes import pid_alive

pytestmark = pytest.mark.real_model


def ask(server: RealModelServer, question: str) -> httpx.Response:
    body = {
        "model": server.spec.alias,
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 16,
        "temperature": 0,
    }
    return httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=60)


def wait_gone(pid: int, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_the_server_answers_as_fleets_model_and_stops_when_the_block_fails() -> None:
    with pytest.raises(RuntimeError, match="the test failed here"), RealModelServer(SMALL) as server:
        pid = server.pid
        assert pid is not None
        response = ask(server, "Say hello.")
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["message"]["content"].strip()
        assert server.fleet_values()["lm_model"] == f"openai/{SMALL.alias}"
        raise RuntimeError("the test failed here")
    assert wait_gone(pid)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.base_url}/models", timeout=2)


def test_the_pace_of_the_model_is_measured_from_a_completion_of_its_own(small_model: RealModelServer) -> None:
    first = small_model.measure_pace()
    second = small_model.measure_pace()
    for pace in (first, second):
        assert pace.calls == 1, pace  # the measure counts its own completion only
        assert pace.prompt_tokens > 300, pace  # its prompt is read anew, not taken from the prompt cache
        assert pace.output_tokens >= PACE_WRITTEN_TOKENS - 1, pace  # the first token comes with the prompt
        assert pace.read_per_second > 0 and pace.written_per_second > 0
    reading_only = first.seconds_for(read=1000, written=0)
    assert first.seconds_for(read=1000, written=100) == pytest.approx(reading_only + 100 / first.written_per_second)


def test_an_unmeasured_pace_cannot_time_a_call() -> None:
    with pytest.raises(ValueError, match="pace is unknown"):
        Speed().seconds_for(read=100, written=10)


STARTER = (
    "from fleet_rlm.models.local import SMALL, RealModelServer\n"
    "server = RealModelServer(SMALL).start()\n"
    "print(server.pid, server.log_path, flush=True)\n"
    "import time; time.sleep(600)\n"
)


def test_a_killed_test_process_leaves_no_server_behind() -> None:
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert starter.stdout is not None
    try:
        pid_text, log = starter.stdout.readline().split()
        pid = int(pid_text)
        assert pid_alive(pid)
    finally:
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait()
        starter.stdout.close()
    assert wait_gone(pid)
    Path(log).unlink()  # what the killed process could not clean up
