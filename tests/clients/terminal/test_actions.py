"""Slash commands and turns against a real server and the scripted model, without a terminal."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from fleet_rlm.api.client import ApiFailure
from fleet_rlm.clients.terminal.actions import ChatState, open_session
from fleet_rlm.clients.terminal.client import ChatClient
from fleet_rlm.clients.terminal.repl import handle_line
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.store import Database, Store, database_url
from fleet_rlm.testing.settings import scripted_settings
from tests.api.server import RunningServer, server_in_thread


@pytest.fixture
def api(model_server: ScriptedModelServer, home: Path) -> Iterator[RunningServer]:
    with server_in_thread(scripted_settings(model_server, home, mode="rlm", sandbox_pool_size=1)) as server:
        yield server


class Chat:
    def __init__(self, client: ChatClient, session_ref: str | None = None) -> None:
        self.out = io.StringIO()
        self.client = client
        session, _ = open_session(client, session_ref)
        self.state = ChatState(client, Console(file=self.out, width=120, color_system=None), session)

    def run(self, line: str) -> list[str]:
        """The lines the chat printed for ``line``."""
        start = self.out.tell()
        assert handle_line(self.state, line)
        return [text.rstrip() for text in self.out.getvalue()[start:].splitlines()]


@pytest.fixture
def chat(api: RunningServer) -> Iterator[Chat]:
    with ChatClient(api.base_url) as client:
        yield Chat(client, "work")


def test_a_message_is_submitted_and_streamed_in_one_request(chat: Chat, model_server: ScriptedModelServer) -> None:
    model_server.script("root", rlm_step("Greet.", "print('hello there')\nSUBMIT(answer='hi')"))
    sent: list[httpx.Request] = []
    chat.client.http.event_hooks = {"request": [sent.append], "response": []}
    lines = chat.run("say hello")
    assert "hello there" in lines and "hi" in lines
    turn_requests = [r for r in sent if "/turns" in r.url.path]
    assert [(r.method, r.url.path) for r in turn_requests] == [
        ("POST", f"/api/v1/sessions/{chat.state.session_id}/turns")
    ]
    assert turn_requests[0].headers["accept"] == "text/event-stream"
    assert chat.client.turns("work")[-1]["status"] == "completed"


def test_child_agents_render_nested_under_their_parent(chat: Chat, model_server: ScriptedModelServer) -> None:
    parent = "r = spawn_agent('child CHILD count')\nprint('parent got', r['answer'])\nSUBMIT(answer=str(r['answer']))"
    child = "print('child counting')\nSUBMIT(answer='child says 3')"
    model_server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    model_server.script_for_task("root", "CHILD", rlm_step("Count.", child))
    lines = chat.run("PARENT: delegate the count")
    started = next(i for i, line in enumerate(lines) if line.startswith("  ⇢ child "))
    finished = next(i for i, line in enumerate(lines) if line.startswith("  ⇠ child "))
    inside = [line for line in lines[started + 1 : finished] if line.strip()]
    assert "    child counting" in inside
    assert any(line.startswith("    ─") and "iteration 1/" in line for line in inside)
    assert all(line.startswith("    ") for line in inside)
    assert "parent got child says 3" in lines[finished:]
    assert "completed" in lines[finished]


def test_context_applies_to_the_next_turn_only(chat: Chat, model_server: ScriptedModelServer, tmp_path: Path) -> None:
    (tmp_path / "sales.csv").write_text("a,b\n1,2\n")
    chat.run(f"/attach {tmp_path / 'sales.csv'}")
    assert chat.run("/context nope.csv") == ["/context nope.csv: no such file in this session; /files lists them"]
    assert chat.run("/context sales.csv") == ["context for the next turn: files/sales.csv"]
    model_server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"), rlm_step("Done.", "SUBMIT(answer='ok')"))
    chat.run("first")
    chat.run("second")
    assert [t["context_paths"] for t in chat.client.turns("work")] == [["files/sales.csv"], []]
    assert chat.run("/context") == ["context for the next turn: none"]


def test_mode_and_budget_are_stored_with_the_session(chat: Chat) -> None:
    assert chat.run("/mode") == ["mode: not set (the server's default)"]
    assert chat.run("/mode direct") == ["mode: direct"]
    assert chat.run("/budget iterations=3 tokens=5000")[:1] == ["iterations   3"]
    assert chat.run("/budget tokens=off timeout=90") == [
        "iterations   3",
        "model_calls  (server default)",
        "timeout      90.0",
        "tokens       (server default)",
    ]
    stored = chat.client.session("work")
    assert stored["mode"] == "direct"
    assert stored["settings"] == {"max_iterations": 3, "turn_timeout": 90.0}


def test_the_evidence_of_an_answer_shows_under_it_live_and_in_the_history(
    chat: Chat, model_server: ScriptedModelServer
) -> None:
    code = "print('reading rows')\nprint('north: 702 \\x1b[8m')\nSUBMIT(answer='North took 702.')"
    model_server.script("root", rlm_step("Sum it.", code))
    live = chat.run("north's total")
    assert live[live.index("Evidence:") + 1] == "  north: 702 \\u001b[8m"
    chat.run("/new other")
    resumed = chat.run("/resume work")
    assert resumed[2:5] == ["North took 702.", "Evidence:", "  north: 702 \\u001b[8m"]


def test_sessions_new_resume_and_their_hints(chat: Chat, model_server: ScriptedModelServer) -> None:
    model_server.script("root", rlm_step("Done.", "SUBMIT(answer='the **answer**')"))
    chat.run("a question")
    assert chat.run("/new other") == ["new session other"]
    assert chat.run("/new other") == ["/new other: a session has that name; /resume other opens it"]
    assert chat.run("/trace") == ["this session has no turns yet"]
    assert chat.run("/resume missing") == [
        "/resume missing: no such session; /sessions lists them, /new missing creates it"
    ]
    resumed = chat.run("/resume work")
    assert resumed[:3] == ["session work: 1 turn(s); the last 1:", "#1 › a question", "the answer"]
    sessions = chat.run("/sessions")
    assert any(line.startswith("*") and "work" in line and "a question" in line for line in sessions)
    assert any(line.lstrip().startswith("other") for line in sessions)
    assert chat.run("/trace 7") == ["/trace 7: no such turn; give its number (1..1) or id"]
    trace = chat.run("/trace 1")
    assert trace[0] == "turn #1: a question"
    assert "├── iteration 1/20" in trace
    assert any("SUBMIT(answer='the **answer**')" in line for line in trace)
    assert trace[-2] == "├── completed"
    assert trace[-1].startswith("└── 1 iterations · 1 model calls · 10→5 tokens · 0 code errors · ")
    assert chat.run("/cancel") == ["no turn is running"]


def test_memory_lists_proposals_and_the_person_approves_edits_rejects_and_forgets(
    chat: Chat, model_server: ScriptedModelServer
) -> None:
    hint = "/memory approve N [TEXT] · edit N TEXT · reject N · forget N"
    assert chat.run("/memory") == [
        "no memory yet: turns propose entries with remember(), and they wait here for your review"
    ]
    code = (
        "remember('north is the largest region', 'summed files/sales.csv')\n"
        "remember('south shrank', 'q3 vs q2')\nremember('the person likes puns', '')\nSUBMIT(answer='noted')"
    )
    model_server.script("root", rlm_step("Remember.", code))
    turn = chat.run("remember this")
    assert "  ✎ remembered (pending review): north is the largest region" in turn
    assert chat.run("/memory") == [
        "waiting for your review (3):",
        " 1. north is the largest region",
        "    why: summed files/sales.csv · from this session",
        " 2. south shrank",
        "    why: q3 vs q2 · from this session",
        " 3. the person likes puns",
        "    from this session",
        hint,
    ]
    assert chat.run("/memory approve 1") == ["approved: north is the largest region"]
    assert chat.run("/memory edit 1 south shrank by 12%") == ["approved as edited: south shrank by 12%"]
    assert chat.run("/memory reject 1") == ["rejected: the person likes puns"]
    assert chat.run("/memory forget 9") == ["/memory forget 9: no such entry (1..2); /memory lists them"]
    assert chat.run("/memory approve") == ["/memory approve needs the entry's number from /memory"]
    assert chat.run("/memory edit 1") == ["/memory edit N TEXT: give the new text"]
    assert chat.run("/memory drop 1") == [
        "/memory drop: expected one of approve, edit, reject, forget, or nothing to list"
    ]
    chat.run("/new elsewhere")
    assert chat.run("/memory") == [
        "approved (2), shown to later turns:",
        " 1. north is the largest region",
        "    why: summed files/sales.csv · from session work",
        " 2. south shrank by 12%",
        "    why: q3 vs q2 · from session work",
        hint,
    ]
    assert chat.run("/memory forget 2") == ["forgot: south shrank by 12%"]
    assert [e["text"] for e in chat.client.memories()] == ["north is the largest region", "the person likes puns"]


def test_memory_shows_a_hidden_character_stored_before_the_rule_as_an_escape(chat: Chat, api: RunningServer) -> None:
    async def store_old_entry() -> None:  # as an older Fleet stored it, before memory refused these
        database = Database(database_url(api.settings))
        try:
            await Store(database).propose_memory(
                "deploy to prod\u202e\U000e0069", "seen\u200b", session_id=None, turn_id=None, max_pending=10
            )
        finally:
            await database.dispose()

    asyncio.run(store_old_entry())
    assert chat.run("/memory")[1:3] == [
        " 1. deploy to prod\\u202e\\U000e0069",
        "    why: seen\\u200b · from a deleted session",
    ]
    assert " ".join(chat.run("/memory approve 1")) == (  # wrapped at the console's width
        "✗ text contains U+202E RIGHT-TO-LEFT OVERRIDE (a direction-changing character) at index 14; only "
        "visible characters, line breaks and tabs are allowed, so that the reviewer sees all later turns "
        "will read; approve it with the text edited"
    )
    assert chat.run("/memory reject 1") == ["rejected: deploy to prod\\u202e\\U000e0069"]


def test_attach_directories_and_get_refuses_corrupted_bytes(
    chat: Chat, api: RunningServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.txt").write_text("alpha\n")
    (data / "sub" / "b.txt").write_text("beta\n")
    assert chat.run(f"/attach {tmp_path / 'missing.csv'}") == [
        f"/attach {tmp_path / 'missing.csv'}: no such file or directory"
    ]
    attached = chat.run(f"/attach {data}")
    assert [line.split(" (")[0] for line in attached] == ["attached files/data/a.txt", "attached files/data/sub/b.txt"]

    monkeypatch.chdir(tmp_path)
    assert chat.run("/get data/a.txt")[0].startswith(f"saved {tmp_path / 'a.txt'} (6 B, sha256 verified)")
    listed = {f["path"]: f for f in chat.client.files("work")}
    blob = (
        api.settings.data_dir / "sessions" / chat.state.session_id / "blobs" / listed["files/data/sub/b.txt"]["sha256"]
    )
    blob.write_text("tampered\n")
    shown = chat.run("/get files/data/sub/b.txt copy.txt")
    assert len(shown) == 1 and shown[0].startswith("✗ files/data/sub/b.txt: downloaded sha256 ")
    assert shown[0].endswith("; nothing saved")
    assert not (tmp_path / "copy.txt").exists() and not (tmp_path / "copy.txt.partial").exists()
    assert chat.run("/get data/a.txt nowhere/x.txt") == [f"/get: no directory {tmp_path / 'nowhere'} to save into"]
    with pytest.raises(ApiFailure) as refused:  # gone since it was listed: the server's error, nothing saved
        chat.client.download_to(chat.state.session_id, "files/gone.txt", tmp_path / "gone.txt", "0" * 64)
    assert (refused.value.status, refused.value.code) == (404, "file_not_found"), refused.value
    assert not (tmp_path / "gone.txt").exists() and not (tmp_path / "gone.txt.partial").exists()


def test_kernel_shows_the_live_state_and_restart_ends_it(chat: Chat, model_server: ScriptedModelServer) -> None:
    assert chat.run("/kernel") == ["no live kernel; the next turn starts one"]
    model_server.script("root", rlm_step("Define.", "totals = {'north': 170}\nSUBMIT(answer='ok')"))
    chat.run("define totals")
    shown = chat.run("/kernel")
    assert shown[0].startswith("kernel sbx_") and ": live, idle for " in shown[0] and "memory " in shown[0]
    assert any(line.split()[:2] == ["totals", "dict"] and "{'north': 170}" in line for line in shown)
    assert shown[-1].startswith("snapshot: 1 variables, ")
    assert chat.run("/restart") == ["kernel restarted: the next turn starts from a fresh Python state"]
    assert (
        chat.run("/kernel")[0] == "no live kernel (the last one ended: restarted on request); the next turn starts one"
    )


def test_child_agents_get_fresh_sandboxes_while_the_parent_keeps_its_kernel(
    chat: Chat, model_server: ScriptedModelServer
) -> None:
    model_server.script_for_task("root", "FIRST", rlm_step("Define.", "secret = 41\nSUBMIT(answer='ok')"))
    chat.run("FIRST: define")
    parent = "r = spawn_agent('child CHILD look')\nSUBMIT(answer=f\"{secret + 1} {r['answer']}\")"
    child = "SUBMIT(answer=str('secret' in globals()))"
    model_server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    model_server.script_for_task("root", "CHILD", rlm_step("Look.", child))
    chat.run("PARENT: delegate")
    assert chat.client.turns("work")[-1]["answer"] == "42 False"
