"""The memory review under a real browser: an entry stored before memory refused hidden characters
shows each as a visible escape, so the person approves what they see (the escaped text)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.store import Database, Store
from tests.api.server import ServerProcess

from .conftest import open_ui, server_env

HIDDEN = "deploy with the staging key\u202e\U000e0069\U000e0067"
SHOWN = "deploy with the staging key\\u202e\\U000e0069\\U000e0067"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fleet-home")


@pytest.fixture(scope="module")
def fleet(scripted: ScriptedModelServer, home: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(server_env(scripted, home), home / "server.log", cli=True).start()
    yield server
    server.stop()


def store_old_entry(home: Path, session_id: str) -> None:
    """An entry as an older Fleet stored it, before memory refused these characters (on a thread of
    its own: Playwright's sync driver runs an event loop on the test's)."""

    async def store() -> None:
        database = Database(f"sqlite+aiosqlite:///{home / 'fleet.db'}")
        try:
            await Store(database).propose_memory(
                HIDDEN, "read in notes\u200b.md", session_id=session_id, turn_id=None, max_pending=10
            )
        finally:
            await database.dispose()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: asyncio.run(store())).result()


def test_an_entry_with_hidden_characters_is_reviewed_escaped(fleet: ServerProcess, home: Path, page: Page) -> None:
    with httpx.Client(base_url=fleet.base_url + "/api/v1") as http:
        session = http.post("/sessions", json={"name": "hidden"}).json()["id"]
        store_old_entry(home, session)
        open_ui(page, fleet.base_url, f"#/s/{session}/files")
        expect(page.get_by_label("Entry 1 (pending)")).to_have_value(SHOWN)
        expect(page.locator(".memory-entry .why")).to_have_text("Why: read in notes\\u200b.md")
        page.get_by_role("button", name="Approve memory entry 1").click()
        expect(page.get_by_label("Entry 1 (approved)")).to_have_value(SHOWN)
        memory = http.get("/memory", params={"session": session}).json()["items"]
    assert [(m["text"], m["status"]) for m in memory] == [(SHOWN, "approved")]
