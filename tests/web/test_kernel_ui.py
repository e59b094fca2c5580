"""The session's kernel in the web UI: kernel events as one line each in the transcript, the Settings
view's kernel state and variables, and "Restart kernel" (refused readably while a turn runs); and
the page listening for every event type."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from fleet_rlm.clients import web
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import EventType
from tests.api.server import ServerProcess

from .conftest import no_serious_violations, open_ui

DEFINE = "totals = {'north': 170, 'south': 200}\nSUBMIT(answer='kept <img src=x onerror=alert(1)>')"
STATIC = Path(web.__file__).parent / "static"
SLOW = "print('working', flush=True)\nimport time\ntime.sleep(30)"


def test_the_kernel_is_shown_restarted_and_refused_while_busy(
    fleet: ServerProcess, scripted: ScriptedModelServer, page: Page
) -> None:
    scripted.script_for_task("root", "KEEP", rlm_step("Keep totals.", DEFINE))
    open_ui(page, fleet.base_url)
    page.get_by_role("button", name="New session", exact=True).click()
    box = page.get_by_role("textbox", name="Message")
    box.fill("KEEP the totals")
    box.press("Enter")
    turn = page.get_by_role("article").last
    expect(turn.get_by_role("region", name="Answer")).to_contain_text("kept", timeout=60_000)
    expect(turn).to_contain_text("Kernel started (sandbox ")

    views = page.get_by_role("navigation", name="Views")
    views.get_by_role("link", name="Settings").click()
    kernel = page.get_by_role("region", name="Kernel")
    expect(kernel).to_contain_text("live")
    expect(kernel).to_contain_text("Idle for")
    expect(kernel).to_contain_text("Memory")
    table = kernel.get_by_role("table", name="Kernel variables")
    expect(table.get_by_role("row", name="totals")).to_contain_text("{'north': 170, 'south': 200}")
    no_serious_violations(page)

    kernel.get_by_role("button", name="Restart kernel").click()
    expect(kernel.get_by_role("status")).to_contain_text("Kernel restarted")
    expect(kernel).to_contain_text("none")
    expect(kernel).to_contain_text("restart:")
    expect(kernel).to_contain_text("No variables.")

    # The next turn says the old kernel ended and its variables are gone; while it runs, a restart is refused.
    scripted.script_for_task("root", "SLOW", rlm_step("Wait.", SLOW))
    views.get_by_role("link", name="Workbench").click()
    box.fill("SLOW work")
    box.press("Enter")
    turn = page.get_by_role("article").last
    expect(turn).to_contain_text("Kernel ended (restart)", timeout=60_000)
    expect(turn.get_by_label("Output")).to_contain_text("working", timeout=60_000)
    views.get_by_role("link", name="Settings").click()
    kernel = page.get_by_role("region", name="Kernel")
    expect(kernel).to_contain_text("a turn is running on it")
    kernel.get_by_role("button", name="Restart kernel").click()
    expect(kernel.get_by_role("status")).to_contain_text("Not restarted: a turn is running on this kernel")
    views.get_by_role("link", name="Workbench").click()
    page.get_by_role("button", name="Stop").click()
    expect(page.get_by_role("article").last).to_contain_text("Cancelled", timeout=15_000)


def test_the_page_listens_for_every_event_type_of_the_protocol() -> None:
    """An ``EventSource`` delivers a named event only to a listener of that name: a type missing from
    ``EVENT_TYPES`` (as the kernel's were) would never reach the transcript."""
    source = (STATIC / "js" / "api.js").read_text()
    listed = set(
        re.findall(r'"([a-z_]+(?:\.[a-z_]+)?)"', source.split("const TERMINAL")[1].split("export const isTerminal")[0])
    )
    expected = {event.value for event in EventType} - {EventType.HEARTBEAT.value}
    assert expected - listed == set(), "api.js EVENT_TYPES misses these event types"
    assert listed - expected == set(), "api.js EVENT_TYPES names types the protocol does not have"
