"""Slash commands of ``fleet chat``: what each takes, and parsing a typed line into a command or a message.

Parsing never raises anything but :class:`CommandError`, whose message is the one-line hint shown
to the person. Arguments are split like a shell would (quotes keep spaces in paths). A line that
starts with ``//`` is a message starting with ``/``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from enum import StrEnum

MODES = ("hybrid", "rlm", "flex", "direct")
MEMORY_ACTIONS = ("approve", "edit", "reject", "forget")
BUDGET_KEYS = {
    "iterations": "max_iterations",
    "model_calls": "max_model_calls",
    "timeout": "turn_timeout",
    "tokens": "max_tokens_per_turn",
}


class ArgKind(StrEnum):
    """What an argument names, which is also what tab completion offers for it."""

    LOCAL_PATH = "local path"
    REMOTE_PATH = "workspace path"
    SESSION = "session"
    MODE = "mode"
    BUDGET = "budget"
    TURN = "turn"
    MEMORY_ACTION = "memory action"
    TEXT = "text"


@dataclass(frozen=True)
class CommandSpec:
    name: str
    usage: str
    summary: str
    args: tuple[ArgKind, ...] = ()
    min_args: int = 0
    max_args: int | None = 0

    def kind_of(self, index: int) -> ArgKind | None:
        """What the ``index``-th argument names (the last kind repeats for ``PATH...``)."""
        if not self.args or (self.max_args is not None and index >= self.max_args):
            return None
        return self.args[min(index, len(self.args) - 1)]


COMMANDS: dict[str, CommandSpec] = {
    spec.name: spec
    for spec in (
        CommandSpec("help", "/help [COMMAND]", "list commands, or explain one", (ArgKind.TEXT,), 0, 1),
        CommandSpec("attach", "/attach PATH...", "upload local files into files/", (ArgKind.LOCAL_PATH,), 1, None),
        CommandSpec(
            "context", "/context [PATH...|none]", "files the next turn must focus on", (ArgKind.REMOTE_PATH,), 0, None
        ),
        CommandSpec("files", "/files [PREFIX]", "list the session's files", (ArgKind.REMOTE_PATH,), 0, 1),
        CommandSpec("artifacts", "/artifacts", "list the artifacts turns wrote"),
        CommandSpec(
            "get",
            "/get REMOTE [LOCAL]",
            "download a file (sha256 verified)",
            (ArgKind.REMOTE_PATH, ArgKind.LOCAL_PATH),
            1,
            2,
        ),
        CommandSpec("trace", "/trace [TURN]", "a turn's events as a tree (default: the last)", (ArgKind.TURN,), 0, 1),
        CommandSpec("mode", "/mode [hybrid|rlm|flex|direct]", "show or set the session's mode", (ArgKind.MODE,), 0, 1),
        CommandSpec(
            "budget",
            "/budget [iterations=N] [model_calls=N] [timeout=SECONDS] [tokens=N|off]",
            "show or set the session's budgets",
            (ArgKind.BUDGET,),
            0,
            None,
        ),
        CommandSpec(
            "memory",
            "/memory [approve N [TEXT] | edit N TEXT | reject N | forget N]",
            "review what turns proposed to remember (N: its number in the list)",
            (ArgKind.MEMORY_ACTION, ArgKind.TEXT),
            0,
            None,
        ),
        CommandSpec("sessions", "/sessions", "list sessions"),
        CommandSpec("resume", "/resume NAME_OR_ID", "switch to another session", (ArgKind.SESSION,), 1, 1),
        CommandSpec("new", "/new [NAME]", "start a new session", (ArgKind.TEXT,), 0, 1),
        CommandSpec("cancel", "/cancel", "cancel the session's running turn"),
        CommandSpec("kernel", "/kernel", "the session's live Python state: variables, memory, idle time"),
        CommandSpec("restart", "/restart", "restart the session's kernel (its variables and snapshot go)"),
        CommandSpec("quit", "/quit", "leave (Ctrl-D does too)"),
    )
}


class CommandError(ValueError):
    """A line that cannot be run; the message is a one-line hint."""


@dataclass(frozen=True)
class Command:
    name: str
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Message:
    text: str


def parse_line(line: str) -> Command | Message | None:
    """A command, a message to send as a turn, or None for a blank line."""
    stripped = line.strip()
    if not stripped:
        return None
    if stripped.startswith("//"):
        return Message(stripped[1:])
    if not stripped.startswith("/"):
        return Message(line.strip("\n"))
    head, _, rest = stripped[1:].partition(" ")
    name = head.lower()
    spec = COMMANDS.get(name)
    if spec is None:
        raise CommandError(f"unknown command /{head}{_suggestion(name)}; /help lists the commands")
    try:
        args = tuple(shlex.split(rest))
    except ValueError as exc:
        raise CommandError(f"/{name}: {exc} (usage: {spec.usage})") from None
    if len(args) < spec.min_args:
        raise CommandError(f"/{name} needs {_count(spec.min_args)}: usage {spec.usage}")
    if spec.max_args is not None and len(args) > spec.max_args:
        raise CommandError(f"/{name} takes at most {_count(spec.max_args)}: usage {spec.usage}")
    if name == "mode" and args and args[0] not in MODES:
        raise CommandError(f"/mode {args[0]}: not a mode; choose one of {', '.join(MODES)}")
    if name == "budget":
        parse_budget(args)
    if name == "memory":
        parse_memory(args)
    if name == "help" and args and args[0].lstrip("/") not in COMMANDS:
        raise CommandError(f"/help {args[0]}: no such command; /help lists the commands")
    return Command(name, args)


def parse_budget(args: tuple[str, ...]) -> dict[str, int | float | None]:
    """``iterations=10 timeout=600`` as session settings; ``off`` clears the optional token budget."""
    changes: dict[str, int | float | None] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or key not in BUDGET_KEYS:
            raise CommandError(f"/budget {arg}: expected KEY=VALUE with KEY one of {', '.join(BUDGET_KEYS)}")
        setting = BUDGET_KEYS[key]
        if value == "off" and key == "tokens":
            changes[setting] = None
            continue
        try:
            number: int | float = float(value) if key == "timeout" else int(value)
        except ValueError:
            kind = "a number of seconds" if key == "timeout" else "a whole number"
            raise CommandError(f"/budget {arg}: {key} must be {kind}") from None
        if number <= 0:
            raise CommandError(f"/budget {arg}: {key} must be greater than 0")
        changes[setting] = number
    return changes


@dataclass(frozen=True)
class MemoryAction:
    action: str
    """approve, edit, reject or forget."""
    ref: str
    """The entry's number in ``/memory``'s list, or its id."""
    text: str | None = None
    """The edited text (approve and edit)."""


def parse_memory(args: tuple[str, ...]) -> MemoryAction | None:
    """``/memory``'s arguments: None to list, else what to do to which entry."""
    if not args:
        return None
    action, rest = args[0], args[1:]
    if action not in MEMORY_ACTIONS:
        raise CommandError(f"/memory {action}: expected one of {', '.join(MEMORY_ACTIONS)}, or nothing to list")
    if not rest:
        raise CommandError(f"/memory {action} needs the entry's number from /memory")
    text = " ".join(rest[1:]) or None
    if action == "edit" and text is None:
        raise CommandError("/memory edit N TEXT: give the new text")
    if action in ("reject", "forget") and text is not None:
        raise CommandError(f"/memory {action} takes only the entry's number")
    return MemoryAction(action, rest[0], text)


def help_lines(name: str | None = None) -> list[tuple[str, str]]:
    """(usage, summary) of one command or of all of them."""
    specs = [COMMANDS[name.lstrip("/")]] if name else list(COMMANDS.values())
    return [(spec.usage, spec.summary) for spec in specs]


def _count(n: int) -> str:
    return f"{n} argument" if n == 1 else f"{n} arguments"


def _suggestion(name: str) -> str:
    close = [c for c in COMMANDS if c.startswith(name[:2])] if name else []
    return f" (did you mean /{close[0]}?)" if len(close) == 1 else ""
