"""Attacks on the web UI: hostile answers and artifacts never run, the page's CSP, the token prompt,
the Host and Origin checks, and the UI's routes (no traversal, no symlink, the API's 404/405 intact)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from fleet_rlm.clients import web
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from tests.api.server import ServerProcess

from .conftest import no_serious_violations, open_ui, server_env

HOSTILE_ANSWER = (
    "Look: <img src=x onerror=\"window.__pwned='img'\"> and <script>window.__pwned='script'</script> "
    "[click me](javascript:window.__pwned='link') [data](data:text/html,<script>alert(1)</script>) "
    "[fine](https://example.com/report)"
)
EVIL_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" onload="window.__pwned=\\\'svg-onload\\\'" width="20" height="20">'
    "<script>window.__pwned=\\'svg-script\\'</script><rect width=\\'20\\' height=\\'20\\' fill=\\'red\\'/></svg>"
)
WRITE_HOSTILE = f"""with open('artifacts/evil.svg', 'w') as f:
    f.write('{EVIL_SVG}')
with open('artifacts/page.html', 'w') as f:
    f.write('<script>window.parent.__pwned = "html"</script><h1>hi</h1>')
SUBMIT(answer={HOSTILE_ANSWER!r})"""


def test_a_hostile_answer_and_script_bearing_artifacts_do_nothing(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page
) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text) if "Content Security" in message.text else None)
    scripted.script("root", rlm_step("Write hostile things.", WRITE_HOSTILE))
    open_ui(page, fleet.base_url)
    page.get_by_role("button", name="New session", exact=True).click()
    page.get_by_role("textbox", name="Message").fill("Be hostile")
    page.get_by_role("button", name="Send").click()
    answer = page.get_by_role("article").last.get_by_role("region", name="Answer")
    expect(answer).to_contain_text("<img src=x onerror=", timeout=30_000)
    expect(answer).to_contain_text("<script>window.__pwned='script'</script>")
    # Markup stayed text; only the https link became a link.
    assert answer.locator("img, script, iframe, object, embed").count() == 0
    expect(answer.get_by_role("link")).to_have_count(1)
    expect(answer.get_by_role("link", name="fine")).to_have_attribute("href", "https://example.com/report")
    expect(answer).to_contain_text("click me")
    # Formats that can carry script are not previewed (test_artifact_previews.py has the attack).
    turn = page.get_by_role("article").last
    expect(turn.get_by_role("img")).to_have_count(0)
    turn.get_by_role("button", name="Preview artifacts/page.html").click()
    expect(turn.get_by_text("Not previewed: HTML can carry scripts; download it to open it.")).to_be_visible()
    with page.expect_download() as download:
        turn.get_by_role("link", name="artifacts/evil.svg").click()
    assert b"<script>" in Path(download.value.path()).read_bytes()
    page.wait_for_timeout(500)
    assert page.evaluate("window.__pwned") is None
    assert dialogs == []
    # Opened directly on the app's origin, the artifact is a download, never a page.
    session = page.url.split("#/s/")[1]
    response = httpx.get(f"{fleet.base_url}/api/v1/sessions/{session}/files/artifacts/evil.svg")
    assert response.headers["content-disposition"].startswith("attachment")
    assert response.headers["content-security-policy"] == "sandbox"


def test_the_page_and_its_assets_carry_a_strict_csp(fleet: ServerProcess) -> None:
    page = httpx.get(fleet.base_url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "'unsafe-inline'" not in csp and "default-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp
    assert "<script>" not in page.text  # no inline script: the page loads one module file
    asset = httpx.get(fleet.base_url + "/ui/js/main.js")
    assert asset.status_code == 200 and "javascript" in asset.headers["content-type"]
    assert asset.headers["content-security-policy"] == csp
    assert asset.headers["x-content-type-options"] == "nosniff"


def test_ui_routes_refuse_traversal_symlinks_and_leave_the_api_contract_alone(
    fleet: ServerProcess, tmp_path: Path
) -> None:
    for path in ("/ui/../pyproject.toml", "/ui/%2e%2e/__init__.py", "/ui/..%2f__init__.py", "/ui/js/../../__init__.py"):
        response = httpx.get(fleet.base_url + path)
        assert response.status_code == 404, path
        assert "STATIC" not in response.text
    # A symlink planted among the assets is not followed.
    link = web.STATIC / "planted-link.txt"
    os.symlink("/etc/passwd", link)
    try:
        assert httpx.get(fleet.base_url + "/ui/planted-link.txt").status_code == 404
    finally:
        link.unlink()
    # The API keeps its JSON errors: unknown API paths, wrong methods.
    unknown = httpx.get(fleet.base_url + "/api/v1/nothing-here")
    assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"
    wrong = httpx.put(fleet.base_url + "/api/v1/sessions")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET, POST"
    post_page = httpx.post(fleet.base_url + "/")
    assert post_page.status_code == 405 and post_page.json()["code"] == "method_not_allowed"


def test_host_and_origin_checks_hold_for_the_ui(fleet: ServerProcess) -> None:
    rebound = httpx.get(fleet.base_url + "/", headers={"Host": "attacker.example"})
    assert rebound.status_code == 421 and rebound.json()["code"] == "host_not_allowed"
    assets = httpx.get(fleet.base_url + "/ui/js/main.js", headers={"Host": "attacker.example"})
    assert assets.status_code == 421
    cross = httpx.post(fleet.base_url + "/api/v1/sessions", json={}, headers={"Origin": "https://evil.example"})
    assert cross.status_code == 403
    same = httpx.post(fleet.base_url + "/api/v1/sessions", json={}, headers={"Origin": fleet.base_url})
    assert same.status_code == 201


TOKEN = "web-test-token-1234"


@pytest.fixture(scope="module")
def guarded(scripted: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("guarded-home")
    server = ServerProcess(server_env(scripted, home, FLEET_API_TOKEN=TOKEN), home / "server.log", cli=True).start()
    yield server
    server.stop()


def test_the_token_is_asked_once_and_streams_work_with_it(
    guarded: ServerProcess, scripted: ScriptedModelServer, page: Page
) -> None:
    scripted.script("root", rlm_step("Say hi.", "print('hello from the sandbox')\nSUBMIT(answer='hi')"))
    page.goto(guarded.base_url + "/")
    dialog = page.get_by_role("dialog", name="API token")
    expect(dialog).to_be_visible()
    no_serious_violations(page)
    dialog.get_by_label("Token").fill("wrong")
    dialog.get_by_role("button", name="Continue").click()
    expect(dialog).to_contain_text("refused")
    dialog.get_by_label("Token").fill(TOKEN)
    dialog.get_by_role("button", name="Continue").click()
    page.wait_for_selector("body[data-ready=true]")
    page.get_by_role("button", name="New session", exact=True).click()
    page.get_by_role("textbox", name="Message").fill("Say hi")
    page.get_by_role("button", name="Send").click()
    turn = page.get_by_role("article").last
    expect(turn.get_by_label("Output")).to_contain_text("hello from the sandbox", timeout=30_000)
    expect(turn.get_by_role("region", name="Answer")).to_contain_text("hi")
    # Kept for the tab: a reload does not ask again, and the token never went into a URL.
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    expect(dialog).to_be_hidden()
    expect(page.get_by_role("article").last.get_by_role("region", name="Answer")).to_contain_text("hi")
    assert TOKEN not in guarded.log.read_text()
    # A new tab (a new browser context: its own sessionStorage) asks again.
    assert page.evaluate("sessionStorage.getItem('fleet.token')") == TOKEN


def test_with_a_token_the_page_loads_but_the_api_does_not(guarded: ServerProcess) -> None:
    assert httpx.get(guarded.base_url + "/").status_code == 200
    assert httpx.get(guarded.base_url + "/api/v1/sessions").status_code == 401
