"""The Evaluation view and the Label action: label a captured turn from its view, the refusal of an
uncaptured one, an eval run followed to its score, a gate report condition by condition, and approval
by its button (the next turn runs the approved program)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from playwright.sync_api import Page, expect

from fleet_rlm.config import load_settings
from fleet_rlm.models.scripted import ScriptedModelServer, fields_reply, rlm_step
from tests.api.server import ServerProcess
from tests.api.test_quality_api import add_candidate

from .conftest import no_serious_violations, open_ui, server_env

ANSWER = "SUBMIT(answer='The total is 250. <img src=x onerror=alert(1)>')"


@pytest.fixture(scope="module")
def quality_server(
    scripted: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, str, str]]:
    """``fleet serve`` over a database that already holds a passing and a failing candidate, measured
    under the very settings the server runs with (so approval finds its evidence current)."""
    home = tmp_path_factory.mktemp("quality-home")
    env = server_env(scripted, home, FLEET_JUDGE_LM_MODEL="openai/judge")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        settings = load_settings()
    # In a thread of its own: the browser's driver runs an event loop on this one.
    with ThreadPoolExecutor(1) as pool:
        good = pool.submit(add_candidate, settings, passed=True).result()
        failing = pool.submit(add_candidate, settings, passed=False).result()
    server = ServerProcess(env, home / "server.log", cli=True).start()
    yield server, good, failing
    server.stop()


def new_session(http: httpx.Client, name: str, capture: bool) -> None:
    http.post(
        "/sessions", json={"name": name, "title": name, "settings": {"capture_replays": capture}}
    ).raise_for_status()


def run_turn(page: Page, message: str) -> None:
    box = page.get_by_role("textbox", name="Message")
    box.fill(message)
    box.press("Enter")
    expect(page.get_by_role("article").last.get_by_role("region", name="Answer")).to_contain_text("250", timeout=60_000)


def test_label_follow_a_run_read_the_gate_and_approve(
    quality_server: tuple[ServerProcess, str, str], scripted: ScriptedModelServer, page: Page
) -> None:
    server, good, failing = quality_server
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    with httpx.Client(base_url=server.base_url + "/api/v1", timeout=30) as http:
        new_session(http, "plain", capture=False)
        new_session(http, "sales", capture=True)

    # An uncaptured turn: the label is refused, with the reason.
    scripted.script("root", rlm_step("Sum.", ANSWER))
    open_ui(page, server.base_url, "#/s/plain")
    run_turn(page, "PLAIN total?")
    turn = page.get_by_role("article").last
    turn.get_by_role("button", name="Label this turn").click()
    turn.get_by_role("button", name="Save label").click()
    refusal = turn.get_by_role("form", name="Label").get_by_role("status")
    expect(refusal).to_contain_text("Not labeled: turn ")
    expect(refusal).to_contain_text("it ran without capture_replays")

    # A captured turn: labeled from its view, with value, group and critical.
    scripted.script("root", rlm_step("Sum.", ANSWER))
    page.get_by_role("link", name="sales", exact=True).click()
    expect(page.get_by_role("heading", name="sales", exact=True)).to_be_visible()
    run_turn(page, "SALES total?")
    turn = page.get_by_role("article").last
    # From the keyboard alone; the reviewed answer starts as the turn's answer, hostile markup as text.
    turn.get_by_role("button", name="Label this turn").focus()
    page.keyboard.press("Enter")
    form = turn.get_by_role("form", name="Label")
    expect(form.get_by_label("Reviewed answer")).to_be_focused()
    expect(form.get_by_label("Reviewed answer")).to_have_value("The total is 250. <img src=x onerror=alert(1)>")
    page.keyboard.press("Tab")
    page.keyboard.type("250")
    page.keyboard.press("Tab")
    page.keyboard.type("revenue")
    page.keyboard.press("Tab")
    page.keyboard.press("Space")
    expect(form.get_by_label("Critical")).to_be_checked()
    no_serious_violations(page)
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    expect(form.get_by_role("button", name="Save label")).to_be_focused()
    page.keyboard.press("Enter")
    expect(form.get_by_role("status")).to_contain_text("Labeled (")
    expect(form.get_by_role("status")).to_contain_text("group revenue, critical")

    # The Evaluation view lists it; an eval run started there is followed to its score.
    page.get_by_role("navigation", name="Views").get_by_role("link", name="Evaluation").click()
    labels = page.get_by_role("table", name="Labels")
    expect(labels).to_contain_text("The total is 250. <img src=x onerror=alert(1)>")
    expect(page.locator("img[src=x]")).to_have_count(0)
    expect(labels).to_contain_text("revenue")
    expect(labels).to_contain_text("critical")
    scripted.script("root", rlm_step("Sum.", ANSWER))
    scripted.script("judge", fields_reply(correct="True", reason="states 250"))
    page.get_by_role("button", name="Run evaluation").click()
    runs = page.get_by_role("table", name="Runs")
    expect(runs).to_contain_text("completed: mean 1.00 over 1", timeout=60_000)
    expect(page.get_by_role("region", name="Runs")).not_to_contain_text("null")
    expect(page.get_by_role("table", name="Scores of ").first).to_contain_text("Passed every check")

    # The gate reports, condition by condition; the failing one is refused, the passing one approved.
    programs = page.get_by_role("region", name="Programs")
    expect(programs).to_contain_text("Serving: builtin")
    failed_gate = page.get_by_role("table", name=f"Gate report {failing}")
    expect(failed_gate.get_by_role("row", name="dev-improved")).to_contain_text("fail")
    expect(failed_gate.get_by_role("row", name="dev-improved")).to_contain_text("0.95 vs 0.90")
    expect(
        page.get_by_role("table", name=f"Gate report {good}").get_by_role("row", name="dev-improved")
    ).to_contain_text("pass")
    no_serious_violations(page)
    page.get_by_role("button", name=f"Approve {failing}").click()
    expect(page.get_by_role("main").get_by_role("status")).to_contain_text("Not approved")
    expect(page.get_by_role("main").get_by_role("status")).to_contain_text("gate_failed")
    page.get_by_role("button", name=f"Approve {good}").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("main").get_by_role("status")).to_contain_text(f"Approved {good}")
    expect(programs).to_contain_text(f"Serving: {good}")
    expect(page.get_by_role("region", name=f"Program {good}")).to_contain_text("approved, serving")
    with httpx.Client(base_url=server.base_url + "/api/v1", timeout=30) as http:
        assert http.get("/programs").json()["serving"] == good
    page.get_by_role("button", name="Roll back").click()
    expect(programs).to_contain_text("Serving: builtin")
    expect(page.get_by_role("region", name=f"Program {good}")).to_contain_text("retired")
    assert dialogs == []
