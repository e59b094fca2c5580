"""What a turn shows (execution errors under their code, tool and sub-model calls, child agents, a PNG
chart as an image, an unverified answer's badge, memory proposals) and the Files, Trace and Settings
views working on it."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
from playwright.sync_api import Page, expect

from fleet_rlm.models.scripted import ScriptedModelServer, fields_reply, rlm_step
from tests.api.server import ServerProcess

from .conftest import open_ui

# A 1x1 PNG, written by sandbox code as a chart would be.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360f8cf00000301010018dd8db00000000049454e44ae426082"
    )
).decode()
FAILING = "print('about to divide')\nx = 1 / 0"
WORK = f"""import base64
summary = llm_query('Summarise: north 170, south 200')
print('summary:', summary)
child = spawn_agent('child counter')
print('child said', child['answer'])
open('artifacts/chart.png', 'wb').write(base64.b64decode('{PNG}'))
print(remember('south leads revenue', 'summed the sales'))"""
CHILD = "print('counting in the child')\nSUBMIT(answer='3')"


def test_a_turn_shows_its_work_and_the_views_review_it(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page
) -> None:
    scripted.script_for_task("root", "REVIEW", rlm_step("Divide.", FAILING), rlm_step("Work.", WORK))
    scripted.script_for_task("root", "child counter", rlm_step("Count.", CHILD))
    scripted.script("sub", "South leads.")
    scripted.script_for_task("root", "REVIEW", fields_reply(answer="South leads with 200."))
    open_ui(page, fleet.base_url)
    page.get_by_role("button", name="New session", exact=True).click()
    page.wait_for_url("**#/s/*")
    session = page.url.split("#/s/")[1]

    # Settings: two iterations at most, so the answer is extracted (unverified).
    page.get_by_role("navigation", name="Views").get_by_role("link", name="Settings").click()
    page.get_by_label("Most iterations per turn").fill("2")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_text("Saved.")).to_be_visible()
    expect(page.get_by_text("Database", exact=True)).to_be_visible()
    expect(page.locator(".readiness")).to_contain_text("ok")
    expect(page.locator(".readiness")).to_contain_text("Model endpoint")
    page.get_by_label("Most iterations per turn").fill("100000")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_text("Not saved")).to_contain_text("max_iterations")

    page.get_by_role("link", name="Workbench", exact=True).click()
    page.get_by_role("textbox", name="Message").fill("REVIEW the sales")
    page.get_by_role("button", name="Send").click()
    turn = page.get_by_role("article").last
    answer = turn.get_by_role("region", name="Answer")
    expect(answer).to_contain_text("South leads with 200.", timeout=60_000)
    expect(answer).to_contain_text("Unverified (extracted)")
    first = turn.get_by_role("region", name="Iteration 1").first
    expect(first.get_by_role("note", name="Execution error")).to_contain_text("ZeroDivisionError")
    expect(first.get_by_label("Output")).to_contain_text("about to divide")
    second = turn.get_by_role("region", name="Iteration 2", exact=True)
    expect(second.get_by_role("list", name="Tool calls")).to_contain_text("llm_query(")
    child = second.locator("details.child")
    expect(child).to_contain_text("child counter")
    expect(child.locator("summary").first).to_contain_text("completed in")
    expect(child).to_contain_text("counting in the child")
    expect(turn.get_by_role("img", name="Preview of artifacts/chart.png")).to_be_visible()
    expect(turn).to_contain_text("Proposed to remember: south leads revenue")

    # Files: the upload-free session lists the artifact with its sha256; the memory proposal is reviewed.
    page.get_by_role("link", name="Files").click()
    files = page.get_by_role("list", name="Files")
    expect(files.get_by_role("link", name="artifacts/chart.png")).to_be_visible()
    entry = page.get_by_label("Entry 1 (pending)")
    entry.fill("south leads revenue in Q2")
    page.get_by_role("button", name="Approve memory entry 1").click()
    expect(page.get_by_label("Entry 1 (approved)")).to_have_value("south leads revenue in Q2")
    with httpx.Client(base_url=fleet.base_url + "/api/v1") as http:
        memory = http.get("/memory", params={"session": session}).json()["items"]
        turn_id = http.get(f"/sessions/{session}/turns").json()["items"][-1]["id"]
        stored = [line for line in http.get(f"/turns/{turn_id}/events").text.splitlines() if line.startswith("data:")]
    assert [(m["text"], m["status"]) for m in memory] == [("south leads revenue in Q2", "approved")]
    page.get_by_role("button", name="Delete artifacts/chart.png").click()
    expect(files.get_by_role("link", name="artifacts/chart.png")).to_have_count(0)

    # Trace: spans with durations; the raw events download as JSONL, one line per stored event.
    page.get_by_role("link", name="Trace").click()
    spans = page.get_by_role("list", name="Spans")
    for label in (
        "Turn",
        "Iteration 1",
        "Iteration 2",
        "Model call",
        "Code execution",
        "llm_query(",
        "Child: child counter",
    ):
        expect(spans).to_contain_text(label)
    with page.expect_download() as download:
        page.get_by_role("button", name="Download events (JSONL)").click()
    lines = Path(download.value.path()).read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, len(stored) + 1))
