"""What a hostile MCP client (or a turn's sandbox code) may try through Fleet's MCP tools: paths out
of the session, links a sandbox made, bad payloads and names. Each is refused, saying why, and
nothing is read or written outside the session's own files."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import SecretStr

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.settings import SettingsFactory

from .server import RunningServer, server_in_thread

TOKEN = "mcp-t0ken"
SECRET = "not for clients"
TRAVERSALS = [
    "../../../etc/passwd",
    "/etc/passwd",
    "files/../../secret.txt",
    "files/../../../../secret.txt",
    "sandboxes/x",
    "files\\..\\..\\secret.txt",
    "",
    "files/a\x00b",
]
LINKS = """import os
os.symlink('/etc/passwd', 'artifacts/passwd')
os.symlink('../../../../secret.txt', 'artifacts/secret.txt')
os.mkfifo('artifacts/fifo')
with open('artifacts/real.txt', 'w') as f:
    f.write('real')
SUBMIT(answer='links made')"""


@pytest.fixture
def guarded(make_settings: SettingsFactory, home: Path) -> Iterator[RunningServer]:
    (home.parent / "secret.txt").write_text(SECRET)
    settings = make_settings(api_token=SecretStr(TOKEN), sandbox_pool_size=0, upload_limit_mb=1)
    with server_in_thread(settings) as server:
        yield server


@contextlib.asynccontextmanager
async def connected(server: RunningServer) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    async with http, Client(streamable_http_client(server.base_url + "/mcp", http_client=http)) as client:
        yield client


def error_text(result: object) -> str:
    assert getattr(result, "is_error", False), result
    return " ".join(getattr(part, "text", "") for part in result.content)  # type: ignore[attr-defined]


def upload(session: str, path: str, content: bytes = b"x") -> dict[str, str]:
    return {"session": session, "path": path, "content_base64": base64.b64encode(content).decode()}


def test_paths_out_of_the_session_are_refused(guarded: RunningServer) -> None:
    async def scenario() -> None:
        async with connected(guarded) as client:
            assert not (await client.call_tool("upload_file", upload("sales", "a.txt"))).is_error
            for path in TRAVERSALS:
                read = await client.call_tool("read_file", {"session": "sales", "path": path})
                assert any(code in error_text(read) for code in ("invalid_path", "file_not_found", "NUL")), path
                assert SECRET not in error_text(read)
                if path != "sandboxes/x":  # an upload's path is relative to files/: that one is files/sandboxes/x
                    stored = await client.call_tool("upload_file", upload("sales", path))
                    assert "invalid_path" in error_text(stored), path
            control = await client.call_tool("upload_file", upload("sales", "a\nb.txt"))
            assert "invalid_path" in error_text(control) and "control character" in error_text(control)
            for uri in (
                "fleet://sessions/sales/..%2F..%2F..%2Fsecret.txt",
                "fleet://sessions/sales/files/../../../secret.txt",
                "fleet://sessions/sales//etc/passwd",
            ):
                with pytest.raises(MCPError) as refused:
                    await client.read_resource(uri)
                assert SECRET not in str(refused.value)
            listed = await client.call_tool("read_file", {"session": "sales", "path": "files/a.txt"})
            assert listed.structured_content is not None and listed.structured_content["text"] == "x"

    asyncio.run(scenario())
    assert not list(guarded.settings.data_dir.rglob("secret.txt"))


def test_links_and_special_files_a_turn_wrote_are_never_read(
    guarded: RunningServer, model_server: ScriptedModelServer
) -> None:
    model_server.script("root", rlm_step("Make links.", LINKS))

    async def scenario() -> None:
        async with connected(guarded) as client:
            result = await client.call_tool("run_task", {"task": "make links", "session": "links"})
            assert result.structured_content is not None, result.content
            assert [a["path"] for a in result.structured_content["artifacts"]] == ["artifacts/real.txt"]
            for path in ("artifacts/passwd", "artifacts/secret.txt", "artifacts/fifo"):
                read = await client.call_tool("read_file", {"session": "links", "path": path})
                assert "file_not_found" in error_text(read), path
            real = await client.call_tool("read_file", {"session": "links", "path": "artifacts/real.txt"})
            assert real.structured_content is not None and real.structured_content["text"] == "real"

    asyncio.run(scenario())


def test_bad_payloads_and_names(guarded: RunningServer, model_server: ScriptedModelServer) -> None:
    async def scenario() -> None:
        async with connected(guarded) as client:
            bad = await client.call_tool("upload_file", {"session": "s", "path": "a.txt", "content_base64": "@@not"})
            assert "invalid_base64" in error_text(bad)
            big = await client.call_tool("upload_file", upload("s", "big.bin", b"\0" * (1024 * 1024 + 1)))
            assert "upload_too_large" in error_text(big)
            for name in ("../x", "ses_0000000000000000", "import", "a" * 65, "a/b"):
                run = await client.call_tool("run_task", {"task": "hi", "session": name})
                assert "invalid_session_name" in error_text(run) or "session_not_found" in error_text(run), name
                stored = await client.call_tool("upload_file", upload(name, "a.txt"))
                assert "invalid_session_name" in error_text(stored) or "session_not_found" in error_text(stored)
            missing = await client.call_tool("get_trace", {"turn_id": "turn_nope"})
            assert "turn_not_found" in error_text(missing)
            wrong_type = await client.call_tool("run_task", {"task": ["not", "text"]})
            assert wrong_type.is_error
            wrong_mode = await client.call_tool("run_task", {"task": "hi", "mode": "root-shell"})
            assert wrong_mode.is_error
            sessions = await client.call_tool("list_sessions", {})
            assert sessions.structured_content is not None and sessions.structured_content["result"] == []

    asyncio.run(scenario())
    assert model_server.model.requests == []


def test_an_upload_name_longer_than_the_file_system_takes_is_refused(guarded: RunningServer) -> None:
    async def scenario() -> None:
        async with connected(guarded) as client:
            for path in ("n" * 256, f"dir/{'é' * 128}", "/".join(["d" * 200] * 6)):
                stored = await client.call_tool("upload_file", upload("s", path))
                assert "invalid_path" in error_text(stored) and "bytes" in error_text(stored), path
            assert not (await client.call_tool("upload_file", upload("s", "n" * 255))).is_error

    asyncio.run(scenario())
