"""``fleet chat`` in a real pseudo-terminal (tmux) against a real server and the scripted model."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fleet_rlm.testing.scripted_model import ScriptedModelServer, rlm_step
from tests.api.server import free_port

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
    pane.type("/get artifacts/revenue_by_region.csv out.csv")
    pane.wait_for(r"saved .*out\.csv \(\d+ B, sha256 verified\)")
    saved = (tmp_path / "work" / "out.csv").read_bytes()
    assert saved == b"region,revenue\neast,5\nnorth,170\nsouth,200\n"
    listed = httpx.get(f"http://127.0.0.1:{port}/api/v1/sessions/sales/files").json()["items"]
    assert hashlib.sha256(saved).hexdigest() in {f["sha256"] for f in listed}

    model_server.script("root", rlm_step("Take a while.", SLOW))
    pane.wait_for_prompt("sales")
    pane.type("Slow task")
    pane.wait_for("slow work started")
    pane.wait_for(r"model calls 1/60 · \d+s · Ctrl-C cancels")
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
