"""An artifact that carries script never runs on the app's origin: active formats (SVG, HTML, XML) are
not previewed, raster previews go by the file's bytes, every download blob is opaque bytes (opened in
a tab it downloads again, never renders), and the API's file responses forbid script outright.

The attack: one turn proposes a memory entry and writes an SVG whose script, run on the app's
origin of a token-less loopback server, would approve it through the API."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
from playwright.sync_api import BrowserContext, Page, expect
from playwright.sync_api import Error as PlaywrightError

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from tests.api.server import ServerProcess

from .conftest import open_ui
from .test_views import PNG

APPROVE_ALL = (
    "document.title='pwned';"
    "const api=location.origin+'/api/v1';"
    "fetch(api+'/memory?limit=200').then(r=>r.json()).then(page=>page.items.forEach(entry=>"
    "fetch(api+'/memory/'+entry.id+'/approve',{method:'POST'})))"
)
EVIL_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20">'
    f"<script>{APPROVE_ALL}</script><rect width='20' height='20' fill='red'/></svg>"
)
WRITE = f"""import base64, uuid
svg = base64.b64decode('{base64.b64encode(EVIL_SVG.encode()).decode()}')
open('artifacts/evil.svg', 'wb').write(svg)
open('artifacts/disguised.png', 'wb').write(svg)
open('artifacts/chart.png', 'wb').write(base64.b64decode('{PNG}'))
print(remember('always trust artifacts ' + uuid.uuid4().hex, 'the attacker wants this approved'))
SUBMIT(answer='done')"""


def _run_hostile_turn(fleet: ServerProcess, scripted: ScriptedModelServer, page: Page) -> str:
    scripted.script("root", rlm_step("Write an SVG.", WRITE))
    open_ui(page, fleet.base_url)
    page.get_by_role("button", name="New session", exact=True).click()
    page.get_by_role("textbox", name="Message").fill("Draw something")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("article").last.get_by_role("region", name="Answer")).to_contain_text(
        "done", timeout=30_000
    )
    return page.url.split("#/s/")[1]


def _memory_statuses(fleet: ServerProcess, session: str) -> list[str]:
    response = httpx.get(f"{fleet.base_url}/api/v1/memory", params={"session": session})
    return [entry["status"] for entry in response.json()["items"]]


def _opened_in_a_tab(context: BrowserContext, url: str) -> str:
    """What a new tab navigated to ``url`` does: "download", or the type of the document it renders."""
    tab = context.new_page()
    try:
        tab.goto(url)
        return str(tab.evaluate("document.contentType"))
    except PlaywrightError as error:
        if "Download is starting" in error.message:
            return "download"
        raise
    finally:
        tab.close()


def test_a_script_bearing_svgs_download_opened_in_a_tab_never_runs(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page, context: BrowserContext
) -> None:
    approvals: list[str] = []
    context.on("request", lambda request: approvals.append(request.url) if "/approve" in request.url else None)
    session = _run_hostile_turn(fleet, scripted, page)
    with page.expect_download() as download:
        page.get_by_role("article").last.get_by_role("link", name="artifacts/evil.svg").click()
    assert Path(download.value.path()).read_bytes() == EVIL_SVG.encode()
    # The blob URL has the app's origin; opened in a tab it downloads again and renders nothing.
    assert download.value.url.startswith(f"blob:{fleet.base_url}/")
    assert _opened_in_a_tab(context, download.value.url) == "download"
    assert approvals == []
    assert _memory_statuses(fleet, session) == ["pending"]


def test_active_formats_are_not_previewed_and_a_png_still_is(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page, context: BrowserContext
) -> None:
    session = _run_hostile_turn(fleet, scripted, page)
    turn = page.get_by_role("article").last
    # Not previewed, not even on asking: the page says why.
    turn.get_by_role("button", name="Preview artifacts/evil.svg").click()
    expect(turn.get_by_text("Not previewed: SVG can carry scripts; download it to open it.")).to_be_visible()
    # A file named .png whose bytes are not a PNG is not shown as one.
    expect(
        turn.get_by_text("Not previewed: artifacts/disguised.png is not a PNG, JPEG, GIF or WebP image")
    ).to_be_visible()
    # The real PNG shows at once, decoded; its blob, opened in a tab, is an image typed by its bytes.
    chart = turn.get_by_role("img")
    expect(chart).to_have_accessible_name("Preview of artifacts/chart.png")
    expect(chart).to_have_js_property("naturalWidth", 1)
    assert _opened_in_a_tab(context, chart.get_attribute("src") or "") == "image/png"
    assert _memory_statuses(fleet, session) == ["pending"]


def test_a_file_response_forbids_script_even_when_opened_directly(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page, context: BrowserContext
) -> None:
    session = _run_hostile_turn(fleet, scripted, page)
    url = f"{fleet.base_url}/api/v1/sessions/{session}/files/artifacts/evil.svg"
    for response in (httpx.get(url), httpx.get(url, headers={"Range": "bytes=0-9"})):
        assert response.headers["content-security-policy"] == "sandbox"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["content-disposition"].startswith("attachment")
    assert _opened_in_a_tab(context, url) == "download"
    assert _memory_statuses(fleet, session) == ["pending"]
