"""The server keeps its OpenAPI contract under property-based testing.

schemathesis (its CLI, as a person would run it) against a real ``fleet serve`` with an API token,
on SQLite and on PostgreSQL: every operation of ``/api/v1/openapi.json`` through its examples,
coverage, fuzzing and stateful phases, with the checks below, and no failure allowed. Generation
is deterministic and bounded by a number of cases per phase (tests/api/schemathesis.toml): the same
cases every run, so CI cannot flake on a new draw, in about 45 s per database here. Turns go to the
scripted model, which answers every request at once whatever the route: no model provider is ever
called. See docs/testing.md ("The API contract").
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, fields_reply

from .server import ServerProcess

REPO = Path(__file__).resolve().parents[2]
TOKEN = "contract-token"
CLOSED_PORT = "http://127.0.0.1:9"
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "allow_header_conformance",
    "negative_data_rejection",
    "use_after_free",
)
CONFIG = REPO / "tests" / "api" / "schemathesis.toml"
"""Deterministic generation, cases per phase, one worker, the hooks."""
MAX_SECONDS = 300
"""A backstop: a run takes about 45 s on a quiet machine; a loaded CI machine has taken over 120 s."""
ANY_ROUTE_REPLY = fields_reply(
    reasoning="Answer at once.",
    route="direct",
    reason="A contract test.",
    answer="ok",
    code="```python\nSUBMIT(answer='ok')\n```",
)
"""One reply every signature reads what it needs from: triage picks direct, direct answers, an RLM
step submits, Flex answers."""


@pytest.fixture
def contract_server(database_url: str, home: Path, tmp_path: Path) -> Iterator[ServerProcess]:
    with ScriptedModelServer() as model:
        model.model.default = lambda _request: ANY_ROUTE_REPLY
        env = {
            "FLEET_HOME": str(home),
            "FLEET_DATABASE_URL": database_url,
            "FLEET_LM_MODEL": "openai/root",
            "FLEET_LM_BASE_URL": model.base_url,
            "FLEET_LM_API_KEY": "scripted",
            "FLEET_SUB_LM_MODEL": "openai/sub",
            "FLEET_LM_NUM_RETRIES": "0",
            "FLEET_MODE": "direct",
            "FLEET_SANDBOX_POOL_SIZE": "0",
            "FLEET_API_TOKEN": TOKEN,
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            # Whatever model a generated session names, nothing off this machine can be called.
            **dict.fromkeys(("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"), CLOSED_PORT),
            "NO_PROXY": "127.0.0.1,localhost",
        }
        server = ServerProcess(env, tmp_path / "serve.log", cli=True)
        try:
            yield server.start()
        finally:
            server.stop()


@pytest.mark.timeout(MAX_SECONDS + 30)
def test_the_server_keeps_its_openapi_contract(contract_server: ServerProcess, tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(CONFIG),
        "run",
        f"{contract_server.base_url}/api/v1/openapi.json",
        "--header",
        f"Authorization: Bearer {TOKEN}",
        "--checks",
        ",".join(CHECKS),
        "--no-color",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=MAX_SECONDS)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-12000:]
    log = contract_server.log.read_text()
    assert "Traceback" not in log, log[-6000:]
