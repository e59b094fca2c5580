"""``fleet chat`` in a real pseudo-terminal (tmux) against a real server and the scripted model."""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fleet_rlm.clients.terminal.client import ChatClient
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.proxy import CuttableProxy
from fleet_rlm.testing.settings import scripted_settings
from tests.api.server import free_port, server_in_thread

from .tmux import Pane, chat_env

SALES = "region,quarter,revenue\nnorth,Q1,100\nsouth,Q1,80\nnorth,Q2,70\nsouth,Q2,120\neast,Q2,5\n"
READ = """import csv
rows = list(csv.DictReader(open('files/sales.csv')))
totals = {}
for row in rows:
    totals[row['region']] = totals.get(row['region'], 0) + int(row['revenue'])
print('totals:', totals)"""
SAVE = """with open('artifacts/revenue_by_region.csv', 'w') as f:
    f.write('region,revenue\\n')
    for region in sorted(totals):
        f.write(f'{region},{totals[region]}\\n')
SUBMIT(answer='**south** leads: ' + ', '.join(f'{r} {t}' for r, t in sorted(totals.items())))"""
SLOW = "print('slow work started', flush=True)\nimport time\ntime.sleep(60)"


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def pane(tmp_path: Path, model_server: ScriptedModelServer, port: int) -> Iterator[Pane]:
    env = chat_env(
        tmp_path,
        {
            "FLEET_LM_MODEL": "openai/root",
            "FLEET_LM_BASE_URL": model_server.base_url,
            "FLEET_LM_API_KEY": "x",
            "FLEET_SUB_LM_MODEL": "openai/sub",
            "FLEET_MODE": "rlm",
            "FLEET_SERVER_PORT": str(port),
            "FLEET_SANDBOX_POOL_SIZE": "1",
        },
    )
    work = tmp_path / "work"
    work.mkdir()
    (work / "sales.csv").write_text(SALES)
    created = Pane(tmp_path / "tmux.sock", work, env)
    yield created
    created.close()


def health(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_attach_task_artifacts_get_cancel_and_exit(
    pane: Pane, model_server: ScriptedModelServer, port: int, tmp_path: Path
) -> None:
    model_server.script("root", rlm_step("Read the sales.", READ), rlm_step("Save them.", SAVE))
    pane.start("--session", "sales")
    pane.wait_for_prompt("sales")
    assert health(port), "the chat starts a server on the configured port"
    assert (tmp_path / "home" / "logs" / "chat-server.log").is_file()

    pane.type("/attach sales.csv")
    pane.wait_for(r"attached files/sales\.csv \(\d+ B, csv\)")
    pane.wait_for_prompt("sales")

    pane.type("Revenue by region; save artifacts/revenue_by_region.csv")
    screen = pane.wait_for(r"south leads: east 5, north 170, south 200")
    pane.wait_for_prompt("sales")
    screen = pane.screen()
    assert "Read the sales." in screen
    assert "totals: {'north': 170, 'south': 200, 'east': 5}" in screen
    assert "iteration 2/20" in screen
    assert "✚ artifacts/revenue_by_region.csv" in screen
    assert "2 iterations · 2 model calls" in screen

    pane.type("/artifacts")
    pane.wait_for(r"^artifacts/revenue_by_region\.csv\s+\d+ B\s+csv", after=len(screen))
    pane.type("/get art", enter=False)
    pane.keys("Tab")  # completes the workspace path
    pane.wait_for(r"^fleet:sales> /get artifacts/revenue_by_region\.csv$")
    pane.type(" out.csv")
    pane.wait_for(r"saved .*out\.csv \(\d+ B, sha256 verified\)")
    saved = (tmp_path / "work" / "out.csv").read_bytes()
    assert saved == b"region,revenue\neast,5\nnorth,170\nsouth,200\n"
    listed = httpx.get(f"http://127.0.0.1:{port}/api/v1/sessions/sales/files").json()["items"]
    assert hashlib.sha256(saved).hexdigest() in {f["sha256"] for f in listed}

    model_server.script("root", rlm_step("Take a while.", SLOW))
    pane.wait_for_prompt("sales")
    pane.type("Slow task")
    pane.wait_for("slow work started")
    pane.wait_for(r"Ctrl-C cancels │ iteration 1/20 · model calls 1/60 · \d+s")
    pane.keys("C-c")
    screen = pane.wait_for("✗ turn cancelled", timeout=30)
    pane.wait_for_prompt("sales")
    turns = httpx.get(f"http://127.0.0.1:{port}/api/v1/sessions/sales/turns").json()["items"]
    assert [t["status"] for t in turns] == ["completed", "cancelled"]

    pane.type("/frobnicate now")
    pane.wait_for(r"^unknown command /frobnicate; /help lists the commands$")
    pane.type("/get nowhere.csv")
    pane.wait_for(r"^/get nowhere\.csv: no such file in this session; /files lists them$")
    pane.keys("C-d")
    screen = pane.wait_for("chat-exited-0")
    assert "Traceback" not in screen
    assert not health(port), "the server the chat started stops with it"


def test_resume_history_multiline_and_a_second_ctrl_c_quits(
    model_server: ScriptedModelServer, home: Path, tmp_path: Path
) -> None:
    settings = scripted_settings(model_server, home, mode="rlm", sandbox_pool_size=1)
    env = chat_env(tmp_path, {})
    with server_in_thread(settings) as server, ChatClient(server.base_url) as api:
        proxy = CuttableProxy(int(server.base_url.rsplit(":", 1)[1]))
        first = Pane(tmp_path / "first.sock", tmp_path, env)
        try:
            model_server.script("root", rlm_step("Answer.", "SUBMIT(answer='**two lines** received')"))
            first.start("--url", proxy.url, "--session", "notes")
            first.wait_for_prompt("notes")
            first.type("first line", enter=False)
            first.keys("Escape", "Enter")
            first.type("second line")
            first.wait_for("two lines received")
            first.wait_for_prompt("notes")
            assert api.turns("notes")[0]["message"] == "first line\nsecond line"
            first.type("/quit")
            first.wait_for("chat-exited-0")
        finally:
            first.close()

        second = Pane(tmp_path / "second.sock", tmp_path, env)
        try:
            second.start("--url", proxy.url, "--session", "notes")
            screen = second.wait_for_prompt("notes")
            assert "session notes: 1 turn(s); the last 1:" in screen
            assert "#1 › first line" in screen and "two lines received" in screen
            second.keys("Up", "Up")  # the latest entry is /quit, the one before it the two-line message
            second.wait_for(r"^fleet:notes> first line\n\.+ second line$")
            second.keys("C-c")
            second.wait_for(r"\(Ctrl-D or /quit leaves\)")

            model_server.script("root", rlm_step("Take a while.", SLOW))
            second.type("Slow task")
            second.wait_for("slow work started")
            proxy.pause()  # the server seems gone: the chat keeps trying, and the cancel cannot get through
            second.wait_for(r"reconnecting \(attempt \d+, from event \d+\)")
            second.keys("C-c")
            second.wait_for("Ctrl-C again quits │ .* cancel failed: server unreachable")
            second.keys("C-c")
            screen = second.wait_for("chat-exited-0")
            assert "Traceback" not in screen
        finally:
            second.close()
            proxy.close()
        assert httpx.get(server.base_url + "/api/v1/health").status_code == 200, "a server found running stays"
        running = api.turns("notes")[-1]
        assert running["status"] == "running", "the cancel never reached the server"
        api.cancel(running["id"])


def server_processes(port: int) -> list[int]:
    """Pids of the servers a chat started to listen on ``port``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"background_server" in cmdline and cmdline.endswith(f"--port\0{port}\0".encode()):
                found.append(int(entry.name))
    return found


def wait_until_gone(port: int) -> None:
    deadline = time.monotonic() + 20
    while server_processes(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server_processes(port) == []


def test_ctrl_c_while_the_background_server_starts_leaves_nothing_behind(pane: Pane, port: int) -> None:
    pane.start()
    deadline = time.monotonic() + 90
    while not server_processes(port):
        assert time.monotonic() < deadline, f"the chat did not start a server:\n{pane.screen()}"
        time.sleep(0.05)
    pane.keys("C-c")
    screen = pane.wait_for("chat-exited-130")
    assert "Traceback" not in screen
    wait_until_gone(port)


def test_a_chat_killed_outright_takes_its_server_along(pane: Pane, port: int) -> None:
    pane.start()
    pane.wait_for(r"^fleet:ses_\w+>", timeout=90)
    [server] = server_processes(port)
    chat = int(Path(f"/proc/{server}/stat").read_text().split()[3])
    os.kill(chat, signal.SIGKILL)
    pane.wait_for("chat-exited-137")
    wait_until_gone(port)
