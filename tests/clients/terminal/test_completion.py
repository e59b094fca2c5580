from __future__ import annotations

from pathlib import Path

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from fleet_rlm.clients.terminal.completion import ChatCompleter

REMOTE = ["files/sales.csv", "files/notes.md", "artifacts/revenue.csv"]


def complete(completer: ChatCompleter, text: str) -> list[str]:
    document = Document(text, len(text))
    return [c.text for c in completer.get_completions(document, CompleteEvent(completion_requested=True))]


@pytest.fixture
def completer() -> ChatCompleter:
    return ChatCompleter(remote_paths=lambda: REMOTE, sessions=lambda: ["sales", "ses_0123abcd"])


def test_commands_complete_from_their_prefix(completer: ChatCompleter) -> None:
    assert complete(completer, "/a") == ["/attach", "/artifacts"]
    assert complete(completer, "/re") == ["/resume", "/restart"]
    assert complete(completer, "/k") == ["/kernel"]
    assert complete(completer, "plain text /a") == []


def test_workspace_paths_sessions_modes_budget_keys_and_memory_actions(completer: ChatCompleter) -> None:
    assert complete(completer, "/get art") == ["artifacts/revenue.csv"]
    assert complete(completer, "/context files/") == ["files/notes.md", "files/sales.csv"]
    assert complete(completer, "/context files/sales.csv files/n") == ["files/notes.md"]
    assert complete(completer, "/resume s") == ["sales", "ses_0123abcd"]
    assert complete(completer, "/mode f") == ["flex"]
    assert complete(completer, "/budget iterations=3 mo") == ["model_calls="]
    assert complete(completer, "/artifacts x") == []
    assert complete(completer, "/memory ") == ["approve", "edit", "reject", "forget"]
    assert complete(completer, "/memory e") == ["edit"]
    assert complete(completer, "/memory edit 1 ") == []


def test_local_paths_complete_from_the_disk(
    completer: ChatCompleter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sales.csv").write_text("a\n")
    (tmp_path / "sales_2025.csv").write_text("a\n")
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    assert sorted(complete(completer, "/attach sa")) == ["les.csv", "les_2025.csv"]
    assert complete(completer, "/attach sales.csv da") == ["ta"]
    assert complete(completer, "/get artifacts/revenue.csv sales_") == ["2025.csv"]


def test_an_unreachable_server_completes_nothing_instead_of_failing() -> None:
    def down() -> list[str]:
        raise ConnectionRefusedError("server down")

    completer = ChatCompleter(remote_paths=down, sessions=down)
    assert complete(completer, "/get a") == []
    assert complete(completer, "/resume x") == []
