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
