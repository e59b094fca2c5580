"""``fleet web`` (a server started if none runs, the browser opened) and sessions in the UI across a
server restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from playwright.sync_api import Page, expect

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from tests.api.server import ServerProcess, free_port

from .conftest import open_ui, server_env


def test_sessions_survive_a_server_restart(scripted: ScriptedModelServer, page: Page, tmp_path: Path) -> None:
    env = server_env(scripted, tmp_path)
    first = ServerProcess(env, tmp_path / "server.log", cli=True).start()
    try:
        scripted.script("root", rlm_step("Answer.", "SUBMIT(answer='kept across restarts')"))
        open_ui(page, first.base_url)
        page.get_by_role("button", name="New session", exact=True).click()
        page.get_by_role("textbox", name="Message").fill("Remember me")
        page.get_by_role("button", name="Send").click()
        expect(page.get_by_role("region", name="Answer")).to_contain_text("kept across restarts", timeout=30_000)
        url = page.url
        # A turn still running when the server stops ends interrupted, and the page says so.
        scripted.script("root", rlm_step("Wait.", "print('waiting', flush=True)\nimport time\ntime.sleep(60)"))
        page.get_by_role("textbox", name="Message").fill("Wait for the restart")
        page.get_by_role("button", name="Send").click()
        expect(page.get_by_role("article").last.get_by_label("Output")).to_contain_text("waiting", timeout=30_000)
    finally:
        first.stop()
    second = ServerProcess(env, tmp_path / "server.log", cli=True)
    second.port, second.base_url = first.port, first.base_url  # the same address, as after a real restart
    second.start()
    try:
        page.goto(url)
        page.reload()
        page.wait_for_selector("body[data-ready=true]")
        expect(page.get_by_role("navigation", name="Sessions").get_by_role("link", name="Remember me")).to_be_visible()
        expect(page.get_by_role("article")).to_have_count(2)
        expect(page.get_by_role("region", name="Answer")).to_contain_text("kept across restarts")
        interrupted = page.get_by_role("article").last
        expect(interrupted.get_by_role("status").filter(has_text="Interrupted")).to_be_visible()
        expect(page.get_by_role("button", name="Send")).to_be_enabled()
    finally:
        second.stop()


def test_fleet_web_starts_a_server_opens_the_browser_and_reuses_a_running_one(
    scripted: ScriptedModelServer, tmp_path: Path
) -> None:
    opened = tmp_path / "opened"
    port = free_port()
    env = {
        **os.environ,
        **server_env(scripted, tmp_path),
        "FLEET_SERVER_PORT": str(port),
        "BROWSER": f"sh -c 'echo \"$1\" > {opened}' sh %s",
    }
    command = [sys.executable, "-m", "fleet_rlm", "web"]
    web = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not opened.exists() or not opened.read_text().strip():
            assert web.poll() is None, web.stdout.read() if web.stdout else ""
            assert time.monotonic() < deadline, "the browser was never opened"
            time.sleep(0.1)
        page_url = opened.read_text().strip()
        assert page_url == f"http://127.0.0.1:{port}/"
        page = httpx.get(page_url)
        assert page.status_code == 200 and "Fleet RLM" in page.text
        # A second `fleet web` finds the running server, prints its address and leaves it alone.
        again = subprocess.run([*command, "--no-open"], env=env, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0, again.stderr
        assert f"http://127.0.0.1:{port}/" in again.stdout
        assert httpx.get(page_url).status_code == 200
    finally:
        web.send_signal(signal.SIGINT)
        web.wait(timeout=30)
        if web.stdout:
            web.stdout.close()
    # Ctrl-C stopped the server it started.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
        except httpx.TransportError:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the server fleet web started is still running")


def test_the_ui_routes_stay_out_of_the_api_contract() -> None:
    """The OpenAPI document and the 405 ``Allow`` table are the API's alone, UI or not."""
    from fleet_rlm.api.app import create_app
    from fleet_rlm.clients import web
    from fleet_rlm.config import Settings

    settings = Settings.model_validate({})
    with_ui = create_app(settings, ui_routes=web.routes())
    assert with_ui.openapi() == create_app(settings).openapi()
    assert with_ui.state.methods.allowed("/") is None
