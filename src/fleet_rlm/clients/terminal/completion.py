"""Tab completion for ``fleet chat``: command names, then each argument by what it names
(local paths, workspace paths, session names, modes, budget keys, memory actions)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from prompt_toolkit.completion import CompleteEvent, Completer, Completion, PathCompleter
from prompt_toolkit.document import Document

from fleet_rlm.clients.terminal.commands import BUDGET_KEYS, COMMANDS, MEMORY_ACTIONS, MODES, ArgKind

CACHE_SECONDS = 3.0


class CachedList:
    """A list fetched on demand and kept a few seconds (completion asks on every Tab)."""

    def __init__(self, fetch: Callable[[], Iterable[str]]) -> None:
        self._fetch = fetch
        self._values: list[str] = []
        self._at = float("-inf")

    def get(self) -> list[str]:
        if time.monotonic() - self._at > CACHE_SECONDS:
            try:
                self._values = sorted(set(self._fetch()))
            except Exception:  # an unreachable server must not break typing
                self._values = []
            self._at = time.monotonic()
        return self._values

    def invalidate(self) -> None:
        self._at = float("-inf")


class ChatCompleter(Completer):
    def __init__(self, remote_paths: Callable[[], Iterable[str]], sessions: Callable[[], Iterable[str]]) -> None:
        self.remote_paths = CachedList(remote_paths)
        self.sessions = CachedList(sessions)
        self._local = PathCompleter(expanduser=True)

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterator[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/") or "\n" in text:
            return
        if " " not in text:
            typed = text[1:].lower()
            for candidate in COMMANDS.values():
                if candidate.name.startswith(typed):
                    yield Completion("/" + candidate.name, start_position=-len(text), display_meta=candidate.summary)
            return
        name, _, rest = text[1:].partition(" ")
        spec = COMMANDS.get(name.lower())
        if spec is None:
            return
        words = rest.split(" ")
        kind = spec.kind_of(len(words) - 1)
        word = words[-1]
        if kind is ArgKind.LOCAL_PATH:
            yield from self._local.get_completions(Document(word, len(word)), complete_event)
            return
        yield from _matching(word, self._candidates(kind, name))

    def _candidates(self, kind: ArgKind | None, command: str) -> list[str]:
        if kind is ArgKind.REMOTE_PATH:
            paths = self.remote_paths.get()
            return [p for p in paths if p.startswith("artifacts/")] + paths if command == "get" else paths
        if kind is ArgKind.SESSION:
            return self.sessions.get()
        if kind is ArgKind.MODE:
            return list(MODES)
        if kind is ArgKind.BUDGET:
            return [f"{key}=" for key in BUDGET_KEYS]
        if kind is ArgKind.MEMORY_ACTION:
            return list(MEMORY_ACTIONS)
        if kind is ArgKind.TEXT and command == "help":
            return list(COMMANDS)
        return []


def _matching(word: str, candidates: Iterable[str]) -> Iterator[Completion]:
    seen: set[str] = set()
    for candidate in candidates:
        if candidate.startswith(word) and candidate not in seen:
            seen.add(candidate)
            yield Completion(candidate, start_position=-len(word))
