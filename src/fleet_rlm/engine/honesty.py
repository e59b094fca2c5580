"""Keeping an RLM loop honest: no answer invented from nothing, no loop on the same failure.

- :class:`LoopGuard` watches executions: when the same code (normalized) fails the same way
  ``warn_after`` times in a row, the model is told so plainly; after ``stop_after`` the loop ends
  with :class:`LoopStopped`, and the turn is ``incomplete``. When the same code succeeds with the same
  output ``warn_after`` times in a row (a small model that found its answer and runs it again instead
  of submitting), the model is told to submit it or change course; after ``stop_after`` such runs the
  loop ends through the extract step (:class:`RepeatedWork`), answering from that work (unverified).
- A reply of the model that does not follow the field format is not the end of the turn: the
  model is told what was wrong and tries the iteration again; after ``stop_after`` such replies in a
  row the loop ends through the extract step too (:mod:`fleet_rlm.engine.malformed`).
- :class:`GuardedExtract` is the RLM's extract step: when the iteration budget runs out without a
  single execution that succeeded, it refuses to extract (:class:`NothingComputed`), so the turn is
  ``incomplete`` instead of presenting an answer made up from errors.
"""

from __future__ import annotations

import ast
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import dspy

from fleet_rlm.config import BudgetSettings
from fleet_rlm.engine.evidence import Evidence
from fleet_rlm.engine.numbers import numbers_in, stated_numbers, written
from fleet_rlm.protocol.visible import quoted
from fleet_rlm.workspace.reading import names_file


class TurnIncomplete(Exception):
    """The loop could not compute a result; the message says why, for the person and the answer."""


class LoopStopped(TurnIncomplete):
    """The same code failed the same way too many times in a row."""


class NothingComputed(TurnIncomplete):
    """The iteration budget ran out and not one execution succeeded."""


class RepeatedWork(Exception):
    """The same code ran to the same output too many times in a row: the loop ends through the extract
    step, which answers from that work. The message says why, for the turn's warning and reason."""


def incomplete_in(exc: BaseException) -> TurnIncomplete | None:
    """The :class:`TurnIncomplete` that ``exc`` is or was raised from (DSPy may wrap it)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, TurnIncomplete):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def parsed(code: str) -> ast.Module | None:
    """The code's AST, or None when it does not parse (or is too deep or too large to)."""
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def normalized_code(code: str) -> str:
    """The code's meaning without comments, blank lines or layout (its AST), for comparing attempts."""
    tree = parsed(code)
    return " ".join(code.split()) if tree is None else ast.dump(tree)


_ADDRESSES = re.compile(r"0x[0-9a-fA-F]+")


def error_signature(error_type: str, message: str) -> str:
    return f"{error_type}: {_ADDRESSES.sub('0x?', message.strip())}"


UNVERIFIED_REASON = (
    "the iteration budget ran out before the model submitted an answer; this answer was extracted from "
    "the work so far and was not checked by running code"
)


def extracted_reason(early_end: str | None) -> str:
    """Why an extracted answer is unverified: the iteration budget ran out, or the loop was ended early
    (``early_end`` says why: the same work repeated, replies that could not be read)."""
    if early_end is None:
        return UNVERIFIED_REASON
    return f"{early_end}; this answer was extracted from the work so far and was not checked by running code"


def extracted_unverified_reason(evidence: Evidence, early_end: str | None = None) -> str:
    """Why an extracted answer is unverified, and whether output of code that ran supports it: the
    answer stays unverified either way (nothing checked that it follows from that output)."""
    base = extracted_reason(early_end)
    if evidence.stated and not evidence.found:
        return f"{base}, and no output of code that ran states its figures"
    if evidence.missing:
        return (
            f"{base}; some of the figures it states appear in the output of code that ran "
            f"(see evidence), others ({_shown(evidence.missing)}) in no such output"
        )
    if evidence.stated:
        return f"{base}; the figures it states appear in the output of code that ran (see evidence)"
    if evidence.lines:
        return f"{base}; names it states appear in the output of code that ran (see evidence)"
    return f"{base}, and no output of code that ran supports it"


MODULE_UNVERIFIED_REASON = (
    "the flex module's model read the input files' text and answered in one pass; no code computed or "
    "checked this answer"
)


SHOWN_NUMBERS = 5


DATA_NUMBERS = 10
"""A message holding at least this many distinct numbers carries data (a table, records, a list)."""


def direct_unverified_reason(answer: str, message: str, history: str = "") -> str | None:
    """Why a direct answer is unverified, or None when it states no number (numbered-list markers aside).

    It is unverified when it states numbers that are not in what the model was given (the message and
    the conversation): it can only have worked them out or recalled them without running code. It is
    unverified too when the message carries data (:data:`DATA_NUMBERS` numbers or more) and the answer
    states numbers from it: picking records or figures out of data by reading it is a computation no
    code checked (a count, a filter, a classification)."""
    stated = stated_numbers(answer)
    if not stated:
        return None
    in_message = {abs(value) for value in numbers_in(message)}
    given = in_message | {abs(value) for value in numbers_in(history)}
    new = [value for value in stated if value not in given]
    if new:
        return (
            f"the model stated numbers that are not in the message ({_shown(new)}) without running code, so "
            "nothing computed or checked them; for a computed answer ask in mode rlm (or hybrid)"
        )
    if len(in_message) >= DATA_NUMBERS:
        picked = [value for value in stated if value in in_message]
        return (
            f"the model picked numbers ({_shown(picked)}) out of the data in the message "
            f"({len(in_message)} numbers) by reading it, without running code, so nothing checked them; "
            "for a computed answer ask in mode rlm (or hybrid)"
        )
    return None


def _shown(values: list[float]) -> str:
    shown = ", ".join(written(value) for value in values[:SHOWN_NUMBERS])
    return shown + (", ..." if len(values) > SHOWN_NUMBERS else "")


def _ordinal(n: int) -> str:
    return {2: "second", 3: "third"}.get(n, f"{n}th")


GENERIC_SUBMIT = 'SUBMIT(answer="<the answer, with its figures>")'
INPUT_NAMES = frozenset({"task", "workspace", "history"})
"""The RLM's input variables: printing them shows what the model was given, never an answer."""


def _prints_only_inputs(call: ast.Call) -> bool:
    return all(isinstance(arg, ast.Name) and arg.id in INPUT_NAMES for arg in call.args)


def shows_only_inputs(code: str) -> bool:
    """Whether ``code`` does nothing but show the RLM's inputs (``print(task)``, ``workspace``): what the
    model already has in its prompt. Small models spent whole turns on it."""
    tree = parsed(code)
    if tree is None:
        return False

    def shows_input(node: ast.stmt) -> bool:
        if not isinstance(node, ast.Expr):
            return False
        value = node.value
        if isinstance(value, ast.Name):
            return value.id in INPUT_NAMES
        return (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "print"
            and bool(value.args)
            and not value.keywords
            and _prints_only_inputs(value)
        )

    return bool(tree.body) and all(shows_input(node) for node in tree.body)


def unread_inputs(task: str, inputs: Iterable[str], codes: Iterable[str]) -> list[str]:
    """The input files ``task`` names that no code of the loop names (:func:`names_file`; code that finds
    files with a pattern names none of them, so its answer is not claimed)."""
    written_code = "\n".join(codes)
    return [path for path in inputs if names_file(task, path) and not names_file(written_code, path)]


def unread_inputs_reason(task: str, inputs: Iterable[str], codes: Iterable[str]) -> str | None:
    """Why a submitted answer is unverified when its code never read a file the task names
    (:func:`unread_inputs`), or None."""
    unread = unread_inputs(task, inputs, codes)
    if not unread:
        return None
    files = ", ".join(quoted(path) for path in unread[:SHOWN_NUMBERS]) + (
        ", ..." if len(unread) > SHOWN_NUMBERS else ""
    )
    return (
        f"the task names {files}, which no code of this turn read, so the answer cannot have used "
        f"{'it' if len(unread) == 1 else 'them'}"
    )


def holds_no_code(code: str) -> bool:
    """Whether ``code`` has no statement at all (empty, blank or only comments): nothing to run."""
    tree = parsed(code)
    return tree is not None and not tree.body


_TABLE_WRITERS = frozenset({"to_csv", "to_json", "to_excel", "to_parquet", "to_markdown"})
"""pandas' methods that save a table to a file: code that saves one and prints nothing has its answer in
that table."""


def _saved_table(tree: ast.Module) -> str | None:
    """The SUBMIT call that hands in the table ``tree`` saves last (``df.to_csv(...)``):
    the table's text, after the path it was saved to when that is written out; None when it saves none."""
    saves = [
        (node.lineno, node.col_offset, node.func.value, node.args[0])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _TABLE_WRITERS
        and node.args
    ]
    if not saves:
        return None
    *_, saved, path = max(saves, key=lambda save: save[:2])
    table = f"{ast.unparse(saved)}.to_string()"
    if isinstance(path, ast.Constant) and isinstance(path.value, str):
        return f"SUBMIT(answer={f'Saved {path.value}:' + chr(10)!r} + {table})"
    return f"SUBMIT(answer={table})"


def submit_suggestion(code: str) -> str:
    """The SUBMIT call that would hand in what ``code`` prints last: ``print(x)`` becomes
    ``SUBMIT(answer=str(x))``, ``print(f"...")`` ``SUBMIT(answer=f"...")``; when it prints nothing, the
    table it saves last (``df.to_csv(path)`` becomes ``SUBMIT(answer='Saved path:\\n' + df.to_string())``);
    a generic call otherwise (prints of the inputs themselves are passed over)."""
    tree = parsed(code)
    if tree is None:
        return GENERIC_SUBMIT
    printed = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "print"
        and node.args
        and not _prints_only_inputs(node)
    ]
    if not printed:
        return _saved_table(tree) or GENERIC_SUBMIT
    args = max(printed, key=lambda node: (node.lineno, node.col_offset)).args
    if len(args) == 1 and isinstance(args[0], ast.JoinedStr | ast.Constant):
        return f"SUBMIT(answer={ast.unparse(args[0])})"
    if len(args) == 1:
        return f"SUBMIT(answer=str({ast.unparse(args[0])}))"
    return f"SUBMIT(answer=' '.join(str(v) for v in ({', '.join(ast.unparse(a) for a in args)})))"


def could_not_compute(reason: str) -> str:
    """The answer of an ``incomplete`` turn: it says plainly that there is no result, and why."""
    return f"I could not compute the result: {reason}."


@dataclass
class LoopGuard:
    """Counts consecutive identical failures of one RLM loop (a turn's or a child's)."""

    warn_after: int
    stop_after: int
    succeeded: int = 0
    """Executions of the loop's own code (not DSPy's setup) that ran without an error."""
    last_error: str | None = None
    _attempt: tuple[str, str] | None = None
    _repeats: int = 0
    _runs: dict[tuple[str, str, frozenset[str]], int] = field(default_factory=dict)
    _effects: dict[tuple[str, frozenset[str]], int] = field(default_factory=dict)
    _malformed: int = 0
    _empty: int = 0
    _last_result: str = ""
    """The code of the newest execution that ran without error and printed something or saved a table:
    what :func:`submit_suggestion` builds the SUBMIT call from."""
    suggested_submit: str | None = None
    """The SUBMIT call the newest execution's advice suggested, if it suggested one; the reminder under
    that output ends with it (:func:`~fleet_rlm.engine.adapters.next_step_reminder`)."""
    reading: str = ""
    """Python that reads the input files (:func:`~fleet_rlm.workspace.reading.example_read`), shown to code that
    only showed the inputs; empty when there is none."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_settings(cls, budget: BudgetSettings) -> LoopGuard:
        return cls(warn_after=budget.loop_guard_warn_after, stop_after=budget.loop_guard_stop_after)

    def success(self, code: str, output: str, files: frozenset[str] = frozenset()) -> int:
        """Record a successful execution: its printed ``output``, and ``files``, the workspace files changed
        so far with their sizes. Returns how many times in this loop this work was done: this code to this
        effect, or (when it printed something) any code to this effect, in a row or not (a small model
        prints a result it found again, or cycles through a few steps it already took)."""
        run = (normalized_code(code), output, files)
        effect = (output, files)
        with self._lock:
            self.succeeded += 1
            self._attempt, self._repeats, self._malformed = None, 0, 0
            self.suggested_submit = None
            self._runs[run] = self._runs.get(run, 0) + 1
            if output.strip():
                self._effects[effect] = self._effects.get(effect, 0) + 1
            if output.strip() or submit_suggestion(code) != GENERIC_SUBMIT:
                self._last_result = code
            return max(self._runs[run], self._effects.get(effect, 0))

    def repeat_advice(self, repeats: int, code: str) -> str | None:
        """What the model is told after the output of ``code``, when it ran that code to the same effect
        before; raises RepeatedWork past the limit.

        The advice names the SUBMIT call to write, built from what the code prints. It does not say that
        the turn would answer from the work anyway: told that, a 1.5B model wrote no code at all."""
        if repeats >= self.stop_after:
            raise RepeatedWork(
                f"the same work was done {repeats} times (the same output, the same files written) instead of "
                "submitting its result, so the turn answered from that work"
            )
        if shows_only_inputs(code):
            step = (
                f"read the data from the files by their paths, such as:\n{self.reading}"
                if self.reading
                else "compute the answer (there are no files), then SUBMIT it"
            )
            return (
                "[Fleet] `task`, `workspace` and `history` are already in your prompt: showing them again "
                f"shows nothing new. Your next code must {step}"
            )
        if repeats < self.warn_after:
            return None
        self.suggested_submit = submit_suggestion(code)
        return (
            f"[Fleet] This is the same output, with the same files written, for the {_ordinal(repeats)} time: "
            "running this again will do the same again. If that output answers the task, your next code must be "
            f"one line that submits it, such as:\n{self.suggested_submit}\n"
            "If the output does not answer the task, change the code."
        )

    def no_code(self) -> str:
        """Record a reply whose code holds no statement (nothing runs), and return what the model is told:
        the SUBMIT call built from the newest code that printed something or saved a table. Seen with a
        1.5B model: it printed the right total, then replied with empty code until the loop guard stopped
        it. Raises RepeatedWork at the limit, counted over the turn."""
        with self._lock:
            self._empty += 1
            empty, last = self._empty, self._last_result
        if empty >= self.stop_after:
            raise RepeatedWork(
                f"the model replied {empty} times with no code instead of submitting a result, so the turn "
                "answered from the work so far"
            )
        self.suggested_submit = submit_suggestion(last) if last else GENERIC_SUBMIT
        return (
            "[Fleet] Your reply held no code, so nothing ran. If an output above answers the task, your next "
            f"code must be one line that submits it, such as:\n{self.suggested_submit}\n"
            "Otherwise write the code of the next step."
        )

    def failure(self, code: str, error_type: str, message: str) -> int:
        """Record a failed execution; returns how many times in a row this code failed this way."""
        attempt = (normalized_code(code), error_signature(error_type, message))
        with self._lock:
            # One line: it ends up in the turn's reason (a SyntaxError's message quotes the code's line).
            said = " ".join(message.split())
            self.last_error = f"{error_type}: {said}" if said else error_type
            self._repeats = self._repeats + 1 if attempt == self._attempt else 1
            self._attempt = attempt
            self._malformed = 0
            self.suggested_submit = None
            return self._repeats

    def malformed(self) -> int:
        """Record a reply of the model that could not be read (nothing ran); returns how many in a row."""
        with self._lock:
            self._malformed += 1
            self.suggested_submit = None
            return self._malformed

    def advice(self, repeats: int) -> str | None:
        """What the model is told on top of the error, or None; raises LoopStopped past the limit."""
        if repeats >= self.stop_after:
            raise LoopStopped(
                f"the same code failed the same way {repeats} times in a row ({self.last_error}); the turn was stopped"
            )
        if repeats >= self.warn_after:
            return (
                f"[Fleet] This same code has now failed with the same error {repeats} times in a row. "
                "Running it again will fail again. Take a different approach: use what is available "
                "(see the error above), change the method, or SUBMIT an answer that says what could not "
                f"be done. After {self.stop_after} identical failures the turn is stopped."
            )
        return None


class GuardedExtract(dspy.Predict):  # type: ignore[misc]
    """The RLM's extract predictor, which refuses to run when nothing was ever computed."""

    def __init__(self, signature: Any, guard: LoopGuard, on_extract: Any = None) -> None:
        super().__init__(signature)
        self._guard = guard
        self._on_extract = on_extract

    def _check(self) -> None:
        if self._guard.succeeded == 0:
            last = self._guard.last_error or "no code ran"
            raise NothingComputed(
                f"the iteration budget ran out and no code ran successfully; the last error was: {last}"
            )
        if self._on_extract is not None:
            self._on_extract()

    def forward(self, **kwargs: Any) -> Any:
        self._check()
        return super().forward(**kwargs)

    async def aforward(self, **kwargs: Any) -> Any:
        self._check()
        return await super().aforward(**kwargs)
