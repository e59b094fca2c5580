"""The evidence of an answer: lines printed by the loop's own code that ran without error and that
state the answer's figures (compared as numbers) or its names.

:class:`PrintedOutputs` keeps what each successful execution printed to stdout (the loop's
:class:`~fleet_rlm.engine.observe.TurnTrace` holds one; a failed execution's output is dropped, a
child agent's loop keeps its own). :func:`pick_evidence` chooses the lines: first, for each number
the answer states (list markers aside), the newest line that states it; then, for each name the
answer states (a word that is not a stop word), the newest line that names it; at most
:data:`MAX_LINES` lines, each cut to :data:`MAX_LINE_CHARS` around what it supports, shown in the
order they were printed. The lines are the sandbox's text, as hostile as any output: clients show
them escaped, as they do other sandbox output.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleet_rlm.engine.numbers import NUMBER, stated_numbers, without_thousands

MAX_LINES = 8
MAX_LINE_CHARS = 200
MAX_EXECUTIONS = 32
"""Successful executions kept (the newest): what a loop printed long before is rarely what it answers from."""
MAX_EXECUTION_CHARS = 20_000
"""Characters kept of one execution's output (the sandbox caps it at ``max_output_chars`` too)."""
MAX_NAMES = 16
"""Names of the answer looked for: a long answer's first ones."""
_WORD = re.compile(r"[^\W\d_][\w'-]*", re.UNICODE)
_CONTEXT_BEFORE = 60
STOP_WORDS = frozenset((
    "about", "above", "after", "again", "all", "also", "and", "any", "are", "because", "been", "before", "being",
    "below", "between", "both", "but", "can", "could", "did", "does", "doing", "done", "down", "during", "each",
    "few", "for", "from", "further", "had", "has", "have", "having", "her", "here", "hers", "him", "his", "how",
    "into", "its", "itself", "just", "more", "most", "nor", "not", "now", "off", "once", "only", "other", "our",
    "ours", "out", "over", "own", "same", "she", "should", "some", "such", "than", "that", "the", "their", "theirs",
    "them", "then", "there", "these", "they", "this", "those", "through", "too", "under", "until", "very", "was",
    "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your",
    "yours", "answer", "answers", "result", "results", "total", "value", "values", "number", "numbers", "found",
    "shows", "show", "shown", "computed", "code", "output", "printed", "data", "file", "files", "per",
))  # fmt: skip
"""Words of three letters or more that name nothing: what an answer says around its names."""


class PrintedOutputs:
    """What the loop's own successful executions printed to stdout, newest :data:`MAX_EXECUTIONS`.

    Chunks arrive from the sandbox's output thread tagged with the iteration that printed them
    (:meth:`printed`); :meth:`succeeded` keeps the current iteration's as one execution's output.
    Output of an execution that failed is never kept: it is dropped at the next success.
    """

    def __init__(self) -> None:
        self._pending: list[tuple[int, str]] = []
        self._pending_chars = 0
        self._kept: deque[str] = deque(maxlen=MAX_EXECUTIONS)
        self._lock = threading.Lock()

    def printed(self, iteration: int, text: str) -> None:
        with self._lock:
            room = MAX_EXECUTION_CHARS - self._pending_chars
            if room > 0 and iteration > 0:
                self._pending.append((iteration, text[:room]))
                self._pending_chars += min(len(text), room)

    def succeeded(self, iteration: int) -> None:
        """The execution of ``iteration`` ran without error: what it printed counts."""
        with self._lock:
            text = "".join(chunk for at, chunk in self._pending if at == iteration)
            self._pending, self._pending_chars = [], 0
            if text.strip():
                self._kept.append(text)

    def executions(self) -> list[str]:
        """Each kept execution's output, oldest first."""
        with self._lock:
            return list(self._kept)


@dataclass(frozen=True)
class Evidence:
    """The lines that support an answer, and which of its figures they state."""

    lines: list[str] = field(default_factory=list)
    stated: list[float] = field(default_factory=list)
    """The distinct numbers the answer states (list markers aside)."""
    found: list[float] = field(default_factory=list)
    """Those some line states."""

    @property
    def missing(self) -> list[float]:
        return [value for value in self.stated if value not in self.found]


@dataclass(frozen=True)
class _Line:
    order: int
    """Its place in all that was printed (higher: printed later)."""
    text: str
    numbers: list[tuple[float, int, int]]
    """Each number in it, with its decimal places and where it starts."""


def pick_evidence(outputs: Iterable[str], answer: str) -> Evidence:
    """The lines of ``outputs`` (oldest execution first) that support ``answer``; see the module's doc."""
    stated = stated_numbers(answer)
    lines = _distinct_lines(outputs)
    newest_first = sorted(lines, key=lambda line: -line.order)
    chosen: dict[int, tuple[_Line, int]] = {}
    found: list[float] = []
    for value in stated:
        if value in found:
            continue
        for line in newest_first:
            at = _number_at(line, value)
            if at is None:
                continue
            found.extend(v for v in stated if v not in found and _number_at(line, v) is not None)
            if len(chosen) < MAX_LINES:
                chosen.setdefault(line.order, (line, at))
            break
    for name in _names(answer):
        if len(chosen) >= MAX_LINES:
            break
        if any(_name_at(line.text, name) is not None for line, _ in chosen.values()):
            continue
        for line in newest_first:
            at = _name_at(line.text, name)
            if at is not None:
                chosen.setdefault(line.order, (line, at))
                break
    shown = [_cut(line.text, at) for _, (line, at) in sorted(chosen.items())]
    return Evidence(lines=shown, stated=stated, found=[v for v in stated if v in found])


def _distinct_lines(outputs: Iterable[str]) -> list[_Line]:
    """Every non-blank line, once (where it was last printed): the same line printed by runs of the
    same code is one piece of evidence."""
    last: dict[str, int] = {}
    order = 0
    for output in outputs:
        for raw in output.splitlines():
            text = raw.strip()
            if text:
                last[text] = order
            order += 1
    return [_Line(at, text, _numbers(text)) for text, at in last.items()]


def _numbers(text: str) -> list[tuple[float, int, int]]:
    plain, starts = without_thousands(text)
    found = []
    for match in NUMBER.finditer(plain):
        written = match.group()
        places = len(written.split(".")[1]) if "." in written else 0
        found.append((abs(float(written)), places, starts[match.start()]))
    return found


def _number_at(line: _Line, value: float) -> int | None:
    """Where ``line`` states ``value``: exactly, or with more decimals that round to it (``29.3456``
    supports an answer's ``29.35``; ``702.4`` supports ``702``)."""
    places = _places(value)
    for number, written_places, at in line.numbers:
        if number == value or (written_places > places and round(number, places) == value):
            return at
    return None


def _places(value: float) -> int:
    text = repr(value)
    return 0 if value.is_integer() or "e" in text else len(text.split(".")[1])


def _names(answer: str) -> list[str]:
    names: list[str] = []
    for match in _WORD.finditer(answer):
        word = match.group().strip("'-").casefold()
        if len(word) >= 3 and word not in STOP_WORDS and word not in names:
            names.append(word)
    return names[:MAX_NAMES]


def _name_at(text: str, name: str) -> int | None:
    for match in _WORD.finditer(text):
        if match.group().strip("'-").casefold() == name:
            return match.start()
    return None


def _cut(text: str, at: int) -> str:
    """``text`` cut to :data:`MAX_LINE_CHARS`, keeping what starts at ``at`` in view."""
    if len(text) <= MAX_LINE_CHARS:
        return text
    start = 0 if at < MAX_LINE_CHARS - _CONTEXT_BEFORE else at - _CONTEXT_BEFORE
    lead = "..." if start else ""
    room = MAX_LINE_CHARS - len(lead)
    piece = text[start : start + room]
    if start + room < len(text):
        piece = piece[: room - 3] + "..."
    return lead + piece
