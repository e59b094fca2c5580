"""The workbench end to end: sessions, a task streaming into the page, files in and out, Stop,
reload mid-turn, and accessibility of every view."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from playwright.sync_api import Page, Request, expect

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.proxy import CuttableProxy
from tests.api.server import ServerProcess

from .conftest import no_serious_violations, open_ui

SALES = b"region,quarter,revenue\nnorth,Q1,100\nsouth,Q1,80\nnorth,Q2,70\nsouth,Q2,120\neast,Q2,5\n"
READ = """import csv
rows = list(csv.DictReader(open('files/sales.csv')))
totals = {}
for row in rows:
    totals[row['region']] = totals.get(row['region'], 0) + int(row['revenue'])
print(totals)"""
SAVE = """with open('artifacts/revenue_by_region.csv', 'w') as f:
    f.write('region,revenue\\n')
    for region in sorted(totals):
        f.write(f'{region},{totals[region]}\\n')
SUBMIT(answer='**Revenue** by region: ' + ', '.join(f'{r}: {t}' for r, t in sorted(totals.items())))"""
TICKING = """import time
for i in range(12):
    print(f'tick {i}', flush=True)
    time.sleep(0.25)
SUBMIT(answer='ticked')"""
SLOW = "print('started', flush=True)\nimport time\ntime.sleep(60)"


def api(fleet: ServerProcess) -> httpx.Client:
    return httpx.Client(base_url=fleet.base_url + "/api/v1", timeout=30)


def new_session(page: Page) -> str:
    page.get_by_role("button", name="New session", exact=True).click()
    expect(page.get_by_role("textbox", name="Message")).to_be_visible()
    return page.url.split("#/s/")[1]


def send(page: Page, message: str) -> None:
    box = page.get_by_role("textbox", name="Message")
    box.fill(message)
    box.press("Enter")


def turn_requests(page: Page) -> list[tuple[str, str, str]]:
    """Method, path and Accept header of each request the page makes for turns from now on."""
    seen: list[tuple[str, str, str]] = []

    def record(request: Request) -> None:
        path = urlsplit(request.url).path
        if "/turns" in path:
            seen.append((request.method, path, request.headers.get("accept", "")))

    page.on("request", record)
    return seen


def test_a_task_streams_code_and_output_before_the_turn_ends(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page
) -> None:
    scripted.script("root", rlm_step("Count slowly.", TICKING))
    open_ui(page, fleet.base_url)
    session = new_session(page)
    requests = turn_requests(page)
    send(page, "Count to twelve, slowly")
    turn = page.get_by_role("article").last
    expect(turn.get_by_label("Code")).to_contain_text("for i in range(12)")
    expect(turn.get_by_label("Output")).to_contain_text("tick 2")
    # Still running: no answer yet, and Stop is offered.
    expect(turn.get_by_role("region", name="Answer")).to_have_count(0)
    expect(page.get_by_role("button", name="Stop")).to_be_enabled()
    expect(turn.get_by_role("region", name="Answer")).to_contain_text("ticked", timeout=30_000)
    expect(turn.get_by_label("Output")).to_contain_text("tick 11")
    expect(turn.get_by_label("Usage")).to_contain_text("model calls")
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    # One request from Send to the answer: the submission's response carries the events.
    assert requests == [("POST", f"/api/v1/sessions/{session}/turns", "text/event-stream")], requests


def test_an_attached_csv_goes_in_and_the_artifact_downloads_with_the_api_bytes(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page, tmp_path: Path
) -> None:
    scripted.script("root", rlm_step("Read the sales.", READ), rlm_step("Save them.", SAVE))
    open_ui(page, fleet.base_url)
    session = new_session(page)
    csv_file = tmp_path / "sales.csv"
    csv_file.write_bytes(SALES)
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach files").click()
    chooser.value.set_files(str(csv_file))
    expect(page.get_by_role("status").filter(has_text="Attached files/sales.csv")).to_be_visible()
    send(page, "Revenue by region; save artifacts/revenue_by_region.csv")
    turn = page.get_by_role("article").last
    expect(turn.get_by_role("region", name="Answer")).to_contain_text("north: 170", timeout=30_000)
    expect(turn.get_by_role("region", name="Answer").locator("strong")).to_have_text("Revenue")
    link = turn.get_by_role("link", name="artifacts/revenue_by_region.csv")
    with page.expect_download() as download:
        link.click()
    downloaded = Path(download.value.path()).read_bytes()
    with api(fleet) as http:
        served = http.get(f"/sessions/{session}/files/artifacts/revenue_by_region.csv").content
        turn_record = http.get(f"/sessions/{session}/turns").json()["items"][-1]
    assert downloaded == served == b"region,revenue\neast,5\nnorth,170\nsouth,200\n"
    assert turn_record["context_paths"] == ["files/sales.csv"]
    # The CSV previews as a table, and the artifact's sha256 is shown.
    turn.get_by_role("button", name="Preview artifacts/revenue_by_region.csv").click()
    expect(turn.get_by_role("table")).to_contain_text("north")
    expect(turn).to_contain_text(hashlib.sha256(served).hexdigest())


HOSTILE_EVIDENCE = (
    "print('noise')\n"
    "print('total: 29,342 <img src=x onerror=alert(1)> \\u202eevil \\x1b[2J')\n"
    "SUBMIT(answer='The total is **29342**.')"
)


def test_the_evidence_of_an_answer_is_listed_under_it_as_escaped_text(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page
) -> None:
    scripted.script("root", rlm_step("Sum it.", HOSTILE_EVIDENCE))
    open_ui(page, fleet.base_url)
    new_session(page)
    send(page, "What is the total?")
    answer = page.get_by_role("article").last.get_by_role("region", name="Answer")
    evidence = answer.get_by_role("list", name="Evidence")
    expect(evidence.get_by_role("listitem")).to_have_text(
        ["total: 29,342 <img src=x onerror=alert(1)> \\u202eevil \\u001b[2J"], timeout=30_000
    )
    expect(answer.locator("img")).to_have_count(0)  # the HTML is text, never an element
    page.reload()  # a stored turn shows it the same way
    answer = page.get_by_role("article").last.get_by_role("region", name="Answer")
    expect(answer.get_by_role("list", name="Evidence").get_by_role("listitem")).to_have_count(1)


def test_stop_ends_a_running_turn_within_a_second(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page
) -> None:
    scripted.script("root", rlm_step("Wait.", SLOW))
    open_ui(page, fleet.base_url)
    new_session(page)
    send(page, "Wait a minute")
    turn = page.get_by_role("article").last
    expect(turn.get_by_label("Output")).to_contain_text("started", timeout=30_000)
    started = time.monotonic()
    page.get_by_role("button", name="Stop").click()
    expect(turn.get_by_role("status").filter(has_text="Cancelled")).to_be_visible(timeout=5_000)
    assert time.monotonic() - started < 1.0 + 0.5  # a second to cancel; the rest is the page's own polling
    expect(page.get_by_role("button", name="Send")).to_be_enabled()


def test_a_refused_submission_says_why_and_keeps_the_message(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page
) -> None:
    scripted.script("root", rlm_step("Wait.", SLOW))
    open_ui(page, fleet.base_url)
    session = new_session(page)
    with api(fleet) as client:  # another client's turn, which this page does not know of
        running = client.post(f"/sessions/{session}/turns", json={"message": "Wait a minute"})
        assert running.status_code == 202, running.text
        with client.stream("GET", f"/turns/{running.json()['id']}/events") as events:
            next(line for line in events.iter_lines() if line.startswith("event: output"))  # it runs
        send(page, "And now this")
        expect(page.get_by_role("status").filter(has_text="Not sent:")).to_contain_text(
            f"turn {running.json()['id']} is still"
        )
        expect(page.get_by_role("textbox", name="Message")).to_have_value("And now this")
        expect(page.get_by_role("article")).to_have_count(0)
        expect(page.get_by_role("button", name="Send")).to_be_enabled()
        client.post(f"/turns/{running.json()['id']}/cancel")


def test_a_reload_mid_turn_shows_every_event_exactly_once(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page
) -> None:
    scripted.script("root", rlm_step("Count slowly.", TICKING))
    open_ui(page, fleet.base_url)
    session = new_session(page)
    send(page, "Count to twelve, slowly")
    expect(page.get_by_role("article").last.get_by_label("Output")).to_contain_text("tick 3", timeout=30_000)
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    assert f"#/s/{session}" in page.url
    turn = page.get_by_role("article").last
    expect(turn.get_by_role("region", name="Answer")).to_contain_text("ticked", timeout=30_000)
    output = turn.get_by_label("Output").inner_text()
    assert [line for line in output.splitlines() if line] == [f"tick {i}" for i in range(12)]
    expect(turn.get_by_role("region", name="Iteration 1")).to_have_count(1)
    expect(turn.get_by_label("Code")).to_have_count(1)
    with api(fleet) as http:
        turn_id = http.get(f"/sessions/{session}/turns").json()["items"][-1]["id"]
        events = [line for line in http.get(f"/turns/{turn_id}/events").text.splitlines() if line.startswith("id:")]
    # Every stored event was applied to the page once: the article saw the last sequence number.
    expect(turn).to_have_attribute("data-last-seq", str(len(events)))


def test_sessions_list_search_rename_delete_and_resume(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page
) -> None:
    with api(fleet) as http:
        for title in ("Quarterly revenue", "Churn analysis"):
            http.post("/sessions", json={"title": title})
    open_ui(page, fleet.base_url)
    sessions = page.get_by_role("navigation", name="Sessions")
    # Most recently active first.
    links = sessions.get_by_role("link")
    expect(links.first).to_have_text("Churn analysis")
    page.get_by_label("Search sessions").fill("quarter")
    expect(sessions.get_by_role("link", name="Quarterly revenue")).to_be_visible()
    expect(sessions.get_by_role("link", name="Churn analysis")).to_have_count(0)
    page.get_by_label("Search sessions").fill("")
    sessions.get_by_role("button", name="Rename Churn analysis").click()
    title = sessions.get_by_role("textbox", name="New title for Churn analysis")
    title.fill("Churn by cohort")
    title.press("Enter")
    expect(sessions.get_by_role("link", name="Churn by cohort", exact=True)).to_be_visible()
    sessions.get_by_role("button", name="Delete Churn by cohort").click()
    sessions.get_by_role("button", name="Confirm delete Churn by cohort").click()
    expect(sessions.get_by_role("link", name="Churn by cohort")).to_have_count(0)
    sessions.get_by_role("link", name="Quarterly revenue").click()
    expect(page.get_by_role("heading", name="Quarterly revenue")).to_be_visible()
    with api(fleet) as http:
        titles = [s["title"] for s in http.get("/sessions").json()["items"]]
    assert "Churn by cohort" not in titles and "Quarterly revenue" in titles


def test_every_view_works_from_the_keyboard_and_passes_axe(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page
) -> None:
    scripted.script("root", rlm_step("Read the sales.", READ), rlm_step("Save them.", SAVE))
    with api(fleet) as http:
        session = http.post("/sessions", json={"title": "Keyboard only"}).json()["id"]
        http.post(f"/sessions/{session}/files", files={"file": ("sales.csv", SALES, "text/csv")})
    open_ui(page, fleet.base_url)
    no_serious_violations(page)
    page.get_by_role("link", name="Keyboard only").focus()
    page.keyboard.press("Enter")
    box = page.get_by_role("textbox", name="Message")
    box.focus()
    page.keyboard.type("Revenue by region")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("and save artifacts/revenue_by_region.csv")
    assert box.input_value() == "Revenue by region\nand save artifacts/revenue_by_region.csv"
    page.keyboard.press("Enter")
    turn = page.get_by_role("article").last
    expect(turn.get_by_role("region", name="Answer")).to_contain_text("north: 170", timeout=30_000)
    no_serious_violations(page)
    for view, landmark in (
        ("Files", "Files"),
        ("Trace", "Spans"),
        ("Settings", "Session settings"),
        ("Evaluation", "Labels"),
    ):
        page.get_by_role("navigation", name="Views").get_by_role("link", name=view).focus()
        page.keyboard.press("Enter")
        expect(page.get_by_role("link", name=view)).to_have_attribute("aria-current", "page")
        expect(page.get_by_label(landmark).first).to_be_visible()
        page.wait_for_timeout(300)
        no_serious_violations(page)


def test_a_dropped_connection_resumes_with_nothing_shown_twice(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page
) -> None:
    scripted.script("root", rlm_step("Count slowly.", TICKING))
    proxy = CuttableProxy(int(fleet.base_url.rsplit(":", 1)[1]))
    try:
        open_ui(page, proxy.url)
        new_session(page)
        send(page, "Count to twelve, slowly")
        turn = page.get_by_role("article").last
        expect(turn.get_by_label("Output")).to_contain_text("tick 2", timeout=30_000)
        requests = turn_requests(page)
        proxy.cut()  # the submission's response ends with its events half read
        expect(turn.get_by_role("region", name="Answer")).to_contain_text("ticked", timeout=30_000)
        output = turn.get_by_label("Output").inner_text()
    finally:
        proxy.close()
    assert [line for line in output.splitlines() if line] == [f"tick {i}" for i in range(12)]
    # The page carried on through the turn's event stream, from the last event it had.
    assert [method for method, path, _ in requests if path.endswith("/events")] == ["GET"], requests


def test_files_dropped_on_the_composer_are_attached_and_the_mode_is_sent(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page
) -> None:
    scripted.script("root", rlm_step("Read.", "print(open('files/notes.txt').read())\nSUBMIT(answer='read')"))
    open_ui(page, fleet.base_url)
    session = new_session(page)
    page.get_by_role("form", name="Composer").evaluate(
        """(form) => {
            const data = new DataTransfer();
            data.items.add(new File(["dropped notes"], "notes.txt", { type: "text/plain" }));
            form.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
        }"""
    )
    expect(page.get_by_role("status").filter(has_text="Attached files/notes.txt")).to_be_visible()
    page.get_by_role("combobox", name="Mode").select_option("rlm")
    send(page, "Read the notes")
    turn = page.get_by_role("article").last
    expect(turn.get_by_label("Output")).to_contain_text("dropped notes", timeout=30_000)
    with api(fleet) as http:
        record = http.get(f"/sessions/{session}/turns").json()["items"][-1]
    assert record["context_paths"] == ["files/notes.txt"]
    assert record["options"].get("mode") == "rlm"
