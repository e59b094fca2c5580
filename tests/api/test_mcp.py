"""Fleet's MCP server with the SDK's own client, over streamable HTTP (``/mcp`` on a real server)
and over stdio (``fleet mcp`` as a subprocess), against real sandboxes and the scripted model."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import SecretStr

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.settings import SettingsFactory

from .server import RunningServer, server_in_thread

TOKEN = "mcp-s3cret"
SALES = b"region,revenue\nnorth,100\nsouth,80\nnorth,70\n"
READ = """import csv
totals = {}
for row in csv.DictReader(open('files/sales.csv')):
    totals[row['region']] = totals.get(row['region'], 0) + int(row['revenue'])
print(totals)"""
SAVE = """with open('artifacts/totals.csv', 'w') as f:
    f.write(''.join(f'{r},{t}\\n' for r, t in sorted(totals.items())))
SUBMIT(answer=f"north {totals['north']}, south {totals['south']}")"""
SLOW = "print('started', flush=True)\nimport time\ntime.sleep(30)"


@pytest.fixture
def guarded(make_settings: SettingsFactory) -> Iterator[RunningServer]:
    with server_in_thread(make_settings(api_token=SecretStr(TOKEN), sandbox_pool_size=0)) as server:
        yield server


@contextlib.asynccontextmanager
async def http_client(server: RunningServer, token: str = TOKEN) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with http, Client(streamable_http_client(server.base_url + "/mcp", http_client=http)) as client:
        yield client


def stdio_parameters(server: RunningServer, model: ScriptedModelServer, home: Path) -> StdioServerParameters:
    """``fleet mcp`` on the same database and data directory as ``server``."""
    settings = server.settings
    env = {
        **os.environ,
        "FLEET_HOME": str(settings.home),
        "FLEET_DATABASE_URL": str(settings.database_url),
        "FLEET_LM_MODEL": "openai/root",
        "FLEET_LM_BASE_URL": model.base_url,
        "FLEET_LM_API_KEY": "scripted",
        "FLEET_SUB_LM_MODEL": "openai/sub",
        "FLEET_LM_NUM_RETRIES": "0",
        "FLEET_MODE": "rlm",
        "FLEET_SANDBOX_POOL_SIZE": "0",
        "XDG_CONFIG_HOME": str(home / "config"),
    }
    return StdioServerParameters(command=sys.executable, args=["-m", "fleet_rlm", "mcp"], env=env)


def leaves(error: BaseException) -> list[BaseException]:
    """The errors inside (nested) exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def turn_status(server: RunningServer, turn_id: str, wanted: set[str]) -> str:
    with server.http(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status = str(http.get(f"/turns/{turn_id}").json()["status"])
            if status in wanted:
                return status
            time.sleep(0.1)
    raise AssertionError(f"turn {turn_id} never reached {wanted}")


def only_turn(server: RunningServer, session: str) -> str:
    with server.http(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            items = http.get(f"/sessions/{session}/turns").json().get("items", [])
            if items:
                return str(items[0]["id"])
            time.sleep(0.1)
    raise AssertionError(f"no turn in {session}")


async def csv_task(client: Client) -> tuple[dict[str, Any], list[tuple[float, float | None, str | None]]]:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    uploaded = await client.call_tool(
        "upload_file",
        {"session": "sales", "path": "sales.csv", "content_base64": base64.b64encode(SALES).decode()},
    )
    assert not uploaded.is_error, uploaded.content
    assert uploaded.structured_content is not None and uploaded.structured_content["path"] == "files/sales.csv"
    result = await client.call_tool(
        "run_task",
        {"task": "Totals by region; save artifacts/totals.csv", "files": ["files/sales.csv"], "session": "sales"},
        progress_callback=on_progress,
    )
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content, progress


def test_over_http_a_task_runs_with_progress_and_its_artifacts_read_back(
    guarded: RunningServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Read.", READ), rlm_step("Save.", SAVE))

    async def scenario() -> None:
        async with http_client(guarded) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert names == {"run_task", "list_sessions", "read_file", "upload_file", "get_trace"}
            result, progress = await csv_task(client)
            assert result["answer"] == "north 170, south 80" and result["status"] == "completed"
            assert result["artifacts"] == [{"path": "artifacts/totals.csv", "size": 19}]
            assert [(done, message) for done, _, message in progress] == [(1, "iteration 1"), (2, "iteration 2")]
            read = await client.call_tool("read_file", {"session": "sales", "path": "artifacts/totals.csv"})
            assert read.structured_content is not None and read.structured_content["text"] == "north,170\nsouth,80\n"
            resource = await client.read_resource(f"fleet://sessions/{result['session']}/artifacts/totals.csv")
            assert resource.contents[0].text == "north,170\nsouth,80\n"  # type: ignore[union-attr]
            sessions = await client.call_tool("list_sessions", {})
            assert sessions.structured_content is not None
            assert [s["name"] for s in sessions.structured_content["result"]] == ["sales"]
            trace = await client.call_tool("get_trace", {"turn_id": result["turn_id"]})
            assert trace.structured_content is not None
            types = [event["type"] for event in trace.structured_content["events"]]
            assert types[0] == "turn.started" and types[-1] == "turn.completed" and "code" in types

    asyncio.run(scenario())


def test_over_http_a_cancelled_call_cancels_its_turn(guarded: RunningServer, model_server: ScriptedModelServer) -> None:
    model_server.script("root", rlm_step("Slow.", SLOW))

    async def scenario() -> None:
        async with http_client(guarded) as client:
            with anyio.move_on_after(3):
                await client.call_tool("run_task", {"task": "Take your time.", "session": "slow"})
                raise AssertionError("the slow task returned")

    asyncio.run(scenario())
    assert turn_status(guarded, only_turn(guarded, "slow"), {"cancelled", "completed", "failed"}) == "cancelled"


def test_over_http_the_token_is_required(guarded: RunningServer) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        answer = httpx.post(guarded.base_url + "/mcp", json=initialize, headers=headers)
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
        assert answer.json()["code"] == "unauthorized"
    assert httpx.post(guarded.base_url + f"/mcp?token={TOKEN}", json=initialize).status_code == 401

    async def scenario() -> None:
        async with http_client(guarded, token="wrong") as client:
            await client.list_tools()

    with pytest.raises(BaseException) as refused:
        asyncio.run(scenario())
    # The SDK reports the 401 above as an error response to its first request.
    assert any(isinstance(error, MCPError) for error in leaves(refused.value)), repr(refused.value)


def test_over_stdio_the_same_tools_and_a_cancelled_call(
    guarded: RunningServer, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """``fleet mcp`` works on the local database: what it runs, the server sees."""
    model_server.script("root", rlm_step("Read.", READ), rlm_step("Save.", SAVE), rlm_step("Slow.", SLOW))
    parameters = stdio_parameters(guarded, model_server, tmp_path)

    async def scenario() -> None:
        async with Client(parameters, read_timeout_seconds=60) as client:
            result, progress = await csv_task(client)
            assert result["answer"] == "north 170, south 80"
            assert len(progress) == 2
            with anyio.move_on_after(3):
                await client.call_tool("run_task", {"task": "Take your time.", "session": "slow"})
                raise AssertionError("the slow task returned")
            # The server process notices the cancel while this client is still connected.
            deadline = time.monotonic() + 20
            while True:
                sessions = await client.call_tool("list_sessions", {})
                assert sessions.structured_content is not None
                slow = [s for s in sessions.structured_content["result"] if s["name"] == "slow"]
                trace_turn = await asyncio.to_thread(only_turn, guarded, "slow") if slow else None
                if trace_turn is not None:
                    trace = await client.call_tool("get_trace", {"turn_id": trace_turn})
                    assert trace.structured_content is not None
                    if trace.structured_content["turn"]["status"] == "cancelled":
                        return
                assert time.monotonic() < deadline, "the cancelled call's turn never ended cancelled"
                await asyncio.sleep(0.2)

    asyncio.run(scenario())
    with guarded.http(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        turns = http.get("/sessions/sales/turns").json()["items"]
        assert [t["answer"] for t in turns] == ["north 170, south 80"]


def test_making_the_app_leaves_the_processes_logging_alone(tmp_path: Path) -> None:
    """The SDK configures the root logger when its server is made; ``fleet serve``'s log stays Fleet's."""
    from fleet_rlm.api.app import create_app
    from fleet_rlm.config import Settings

    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    create_app(Settings.model_validate({"home": tmp_path}))
    assert (list(root.handlers), root.level) == before
