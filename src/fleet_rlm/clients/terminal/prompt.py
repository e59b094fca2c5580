"""The input line of ``fleet chat``: history kept across runs, Tab completion, multi-line input.

Enter sends; Esc-Enter (or Alt-Enter) starts a new line; a paste keeps its newlines.
"""

from __future__ import annotations

from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import Completer
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

from fleet_rlm.config import Settings

HISTORY_FILE = "chat_history"


def history_path(settings: Settings) -> Path:
    return settings.data_dir / HISTORY_FILE


def _bindings() -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    return bindings


def make_prompt(settings: Settings, completer: Completer) -> PromptSession[str]:
    path = history_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    return PromptSession(
        history=FileHistory(str(path)),
        completer=completer,
        complete_while_typing=False,
        key_bindings=_bindings(),
        prompt_continuation=lambda width, _line, _soft: "." * (width - 1) + " ",
        enable_history_search=False,
    )
