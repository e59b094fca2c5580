"""The web workbench under a real browser: Debian's chromium (by its path; nothing downloads a
browser) driven by Playwright, against a real ``fleet serve`` subprocess and the scripted model.

One server per test module (tests that restart it start their own); each test gets a fresh browser
context. When a test fails, a screenshot of each view is saved under ``test-output/web/<test>/``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, sync_playwright

from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.testing.settings import scripted_env
from tests.api.server import ServerProcess

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "web"
VIEWS = ("", "files", "trace", "settings", "evaluation")

if not CHROMIUM.exists():  # pragma: no cover - .ci/run installs it
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)


def server_env(model_server: ScriptedModelServer, home: Path, **extra: str) -> dict[str, str]:
    database_url = f"sqlite+aiosqlite:///{home / 'fleet.db'}"
    return scripted_env(
        model_server, home, database_url, FLEET_SANDBOX_POOL_SIZE="1", FLEET_SSE_HEARTBEAT_SECONDS="2", **extra
    )


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(stream_chunk_chars=12, stream_chunk_delay=0.01) as server:
        yield server


@pytest.fixture(scope="module")
def fleet(scripted: ScriptedModelServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``fleet serve`` (the CLI command) on a free port, shared by the module's tests."""
    home = tmp_path_factory.mktemp("fleet-home")
    server = ServerProcess(server_env(scripted, home), home / "server.log", cli=True).start()
    yield server
    server.stop()


# Package scope: the sync driver runs an event loop on the test thread while it lives, and tests after
# this package call asyncio.run on that thread.
@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="package")
def browser(playwright: Playwright) -> Iterator[Browser]:
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
    yield browser
    browser.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def save_views(page: Page, base_url: str, folder: Path) -> None:
    """A screenshot of the page as it is, then of each view of the session it shows."""
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / "as-failed.png"), full_page=True)
    match = re.search(r"#/s/([^/]+)", page.url)
    for view in VIEWS:
        suffix = f"#/s/{match[1]}{'/' + view if view else ''}" if match else "#/"
        page.goto(f"{base_url}/{suffix}")
        page.wait_for_timeout(500)
        page.screenshot(path=str(folder / f"{view or 'workbench'}.png"), full_page=True)


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    context = browser.new_context(accept_downloads=True, viewport={"width": 1280, "height": 900})
    yield context
    context.close()


@pytest.fixture
def page(context: BrowserContext, request: pytest.FixtureRequest) -> Iterator[Page]:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_default_timeout(15_000)
    yield page
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        base = re.match(r"https?://[^/]+", page.url)
        if base:
            save_views(page, base[0], SCREENSHOTS / re.sub(r"\W+", "_", request.node.name))
    assert not errors, f"uncaught errors in the page: {errors}"


def open_ui(page: Page, base_url: str, fragment: str = "") -> None:
    page.goto(f"{base_url}/{fragment}")
    page.wait_for_selector("body[data-ready=true]")


def no_serious_violations(page: Page) -> None:
    """axe-core finds no serious or critical accessibility violation in the page as it is now."""
    results = Axe().run(page)
    bad = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    assert not bad, "\n".join(f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']]}" for v in bad)
