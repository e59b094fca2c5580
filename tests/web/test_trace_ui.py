"""A traced turn's trace id in the Trace view, the same one its spans reached the OTLP receiver with."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.otlp import OtlpReceiver
from tests.api.server import ServerProcess

from .conftest import open_ui, server_env

pytest.importorskip("opentelemetry.sdk", reason="the tracing extra is not installed (uv sync --all-extras)")


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def traced(
    scripted: ScriptedModelServer, receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("fleet-traced")
    env = server_env(scripted, home, FLEET_OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
    server = ServerProcess(env, home / "server.log", cli=True).start()
    yield server
    server.stop()


def test_the_trace_view_shows_the_turns_trace_id(
    traced: ServerProcess, scripted: ScriptedModelServer, receiver: OtlpReceiver, page: Page
) -> None:
    scripted.script_for_task("root", "TRACED", rlm_step("Answer.", "SUBMIT(answer='traced answer')"))
    open_ui(page, traced.base_url)
    page.get_by_role("button", name="New session", exact=True).click()
    box = page.get_by_role("textbox", name="Message")
    box.fill("TRACED turn")
    box.press("Enter")
    expect(page.get_by_role("article").last.get_by_role("region", name="Answer")).to_contain_text(
        "traced answer", timeout=60_000
    )
    page.get_by_role("navigation", name="Views").get_by_role("link", name="Trace").click()
    line = page.locator(".trace-id")
    expect(line).to_have_text(re.compile(r"^Trace id: [0-9a-f]{32}$"), timeout=10_000)
    shown = (line.text_content() or "").removeprefix("Trace id: ")
    traced.stop()  # the exporter sends what it buffered when the server stops
    assert shown in {span.trace_id for span in receiver.spans if span.name == "invoke_agent fleet-rlm"}
