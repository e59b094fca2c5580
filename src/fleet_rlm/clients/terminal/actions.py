"""What each slash command and each message does, against the server of the current session.

Handlers print to the console and raise :class:`~fleet_rlm.clients.terminal.commands.CommandError`
for a bad argument (a one-line hint); server errors (:class:`ApiFailure`) are reported by the REPL.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text

from fleet_rlm.api.client import ApiFailure
from fleet_rlm.clients.cli.render import evidence_lines, preview
from fleet_rlm.clients.terminal.client import ChatClient
from fleet_rlm.clients.terminal.commands import BUDGET_KEYS, Command, CommandError, help_lines, parse_budget
from fleet_rlm.clients.terminal.memory import do_memory
from fleet_rlm.clients.terminal.stream import follow_streamed_turn, follow_turn
from fleet_rlm.clients.terminal.trace import trace_tree
from fleet_rlm.protocol.ids import is_session_id
from fleet_rlm.protocol.status import ACTIVE_STATUSES, TurnStatus
from fleet_rlm.workspace.manifest import human_size

HISTORY_SHOWN = 3
TITLE_CHARS = 60


class Quit(Exception):
    """The person asked to leave."""


@dataclass
class ChatState:
    client: ChatClient
    console: Console
    session: dict[str, Any]
    context_paths: list[str] = field(default_factory=list)
    on_files_changed: Callable[[], None] = lambda: None

    @property
    def session_id(self) -> str:
        return str(self.session["id"])

    @property
    def label(self) -> str:
        return str(self.session.get("name") or self.session_id)

    def say(self, text: str, style: str = "dim") -> None:
        self.console.print(Text(text, style=style))


# Sessions -------------------------------------------------------------------------------------


def open_session(client: ChatClient, ref: str | None) -> tuple[dict[str, Any], bool]:
    """The session named ``ref`` (created when the name is new), or a new unnamed one; and whether it existed."""
    if ref is None:
        return client.create_session(), False
    found = client.session_or_none(ref)
    if found is not None:
        return found, True
    if is_session_id(ref):  # a missing id is an error, not a new name
        raise CommandError(f"no session with id {ref}; /sessions lists them")
    return client.create_session(name=ref), False


def show_history(state: ChatState, count: int = HISTORY_SHOWN) -> None:
    turns = state.client.turns(state.session_id)
    if not turns:
        state.say(f"session {state.label}: no turns yet")
        return
    state.say(f"session {state.label}: {len(turns)} turn(s); the last {min(count, len(turns))}:")
    for turn in turns[-count:]:
        state.console.print(Text(f"#{turn['position']} › {turn['message']}", style="bold"))
        if turn["status"] == TurnStatus.COMPLETED:
            if turn.get("unverified"):
                state.say(f"  ⚠ unverified answer: {turn.get('unverified_reason')}", "yellow")
            state.console.print(Markdown(str(turn["answer"] or "")))
            for shown in evidence_lines(turn.get("evidence") or []):
                state.console.print(shown)
        else:
            state.say(f"  {turn['status']}" + (f": {turn['error']}" if turn.get("error") else ""), "yellow")
    running = [t for t in turns if t["status"] in ACTIVE_STATUSES]
    if running:
        state.say(f"turn #{running[-1]['position']} is still {running[-1]['status']}; following it")
        follow_turn(state.client, state.console, str(running[-1]["id"]))


def switch_to(state: ChatState, session: dict[str, Any], existed: bool) -> None:
    state.session = session
    state.context_paths = []
    state.on_files_changed()
    if existed:
        show_history(state)
    else:
        state.say(f"new session {state.label}")


# Turns ----------------------------------------------------------------------------------------


def send_message(state: ChatState, message: str) -> None:
    if not state.session.get("title"):  # so /sessions says what an unnamed session was about
        state.session = state.client.update_session(state.session_id, title=preview(message, TITLE_CHARS))
    with state.client.stream_turn(
        state.session_id, message, idempotency_key=uuid.uuid4().hex, context_paths=state.context_paths
    ) as turn:
        state.context_paths = []
        follow_streamed_turn(state.client, state.console, turn)
    state.on_files_changed()


def _turn_ref(state: ChatState, ref: str | None) -> dict[str, Any]:
    turns = state.client.turns(state.session_id)
    if not turns:
        raise CommandError("this session has no turns yet")
    if ref is None:
        return turns[-1]
    for turn in turns:
        if ref.lstrip("#") == str(turn["position"]) or ref == turn["id"]:
            return turn
    raise CommandError(f"/trace {ref}: no such turn; give its number (1..{len(turns)}) or id")


# Commands -------------------------------------------------------------------------------------


def do_help(state: ChatState, args: tuple[str, ...]) -> None:
    table = Table(show_header=False, box=None, padding=(0, 2), pad_edge=False)
    for usage, summary in help_lines(args[0] if args else None):
        table.add_row(Text(usage), Text(summary, style="dim"))
    state.console.print(table)
    if not args:
        state.say("Anything else is sent as a task. Esc-Enter adds a line; Ctrl-C cancels a turn; Ctrl-D leaves.")


def do_attach(state: ChatState, args: tuple[str, ...]) -> None:
    uploads: list[tuple[Path, str]] = []
    for raw in args:
        path = Path(raw).expanduser()
        if path.is_dir():
            uploads.extend(
                (f, f"{path.name}/{f.relative_to(path).as_posix()}") for f in sorted(path.rglob("*")) if f.is_file()
            )
        elif path.is_file():
            uploads.append((path, path.name))
        else:
            raise CommandError(f"/attach {raw}: no such file or directory")
    for source, destination in uploads:
        stored = state.client.upload(state.session_id, source, destination)
        state.say(f"attached {stored['path']} ({human_size(int(stored['size']))}, {stored['kind']})", "green")
    state.on_files_changed()


def _remote_path(state: ChatState, raw: str, files: list[dict[str, Any]], command: str) -> dict[str, Any]:
    by_path = {f["path"]: f for f in files}
    for candidate in (raw, f"files/{raw}", f"artifacts/{raw}"):
        if candidate in by_path:
            return by_path[candidate]
    raise CommandError(f"/{command} {raw}: no such file in this session; /files lists them")


def do_context(state: ChatState, args: tuple[str, ...]) -> None:
    if args == ("none",):
        state.context_paths = []
    elif args:
        files = state.client.files(state.session_id)
        state.context_paths = [_remote_path(state, raw, files, "context")["path"] for raw in args]
    shown = ", ".join(state.context_paths) or "none"
    state.say(f"context for the next turn: {shown}")


def _files_table(files: list[dict[str, Any]]) -> Table:
    table = Table("path", "size", "kind", "sha256", box=None, padding=(0, 2), pad_edge=False)
    for file in files:
        table.add_row(Text(file["path"]), human_size(int(file["size"])), file["kind"], file["sha256"][:12])
    return table


def do_files(state: ChatState, args: tuple[str, ...]) -> None:
    files = [f for f in state.client.files(state.session_id) if f["path"].startswith(args[0] if args else "")]
    if not files:
        state.say("no files" + (f" under {args[0]}" if args else "; /attach uploads some"))
        return
    state.console.print(_files_table(files))


def do_artifacts(state: ChatState, _args: tuple[str, ...]) -> None:
    files = [f for f in state.client.files(state.session_id) if f["origin"] == "artifact"]
    if not files:
        state.say("no artifacts yet")
        return
    state.console.print(_files_table(files))


def do_get(state: ChatState, args: tuple[str, ...]) -> None:
    remote = _remote_path(state, args[0], state.client.files(state.session_id), "get")
    name = Path(remote["path"]).name
    target = Path.cwd() / Path(args[1]).expanduser() if len(args) > 1 else Path.cwd() / name
    if target.is_dir() or (len(args) > 1 and args[1].endswith("/")):
        target = target / name
    if not target.parent.is_dir():
        raise CommandError(f"/get: no directory {target.parent} to save into")
    size = state.client.download_to(state.session_id, remote["path"], target, remote["sha256"])
    state.say(f"saved {target} ({human_size(size)}, sha256 verified)", "green")


def do_trace(state: ChatState, args: tuple[str, ...]) -> None:
    turn = _turn_ref(state, args[0] if args else None)
    if turn["status"] in ACTIVE_STATUSES:
        raise CommandError(f"turn #{turn['position']} is still {turn['status']}; trace it when it ends")
    events = list(state.client.events(str(turn["id"])))
    state.console.print(trace_tree(events, f"turn #{turn['position']}: {preview(turn['message'])}"))
    if turn.get("trace_id"):
        state.say(f"trace id: {turn['trace_id']}", "dim")


def do_mode(state: ChatState, args: tuple[str, ...]) -> None:
    if args:
        state.session = state.client.update_session(state.session_id, mode=args[0])
    mode = state.session.get("mode")
    state.say(f"mode: {mode}" if mode else "mode: not set (the server's default)")


def do_budget(state: ChatState, args: tuple[str, ...]) -> None:
    settings = dict(state.session.get("settings") or {})
    if args:
        for key, value in parse_budget(args).items():
            if value is None:
                settings.pop(key, None)
            else:
                settings[key] = value
        state.session = state.client.update_session(state.session_id, settings=settings)
        settings = dict(state.session.get("settings") or {})
    for short, key in BUDGET_KEYS.items():
        value = settings.get(key)
        state.say(
            f"{short:12} {value if value is not None else '(server default)'}", "" if value is not None else "dim"
        )


def do_sessions(state: ChatState, _args: tuple[str, ...]) -> None:
    table = Table("", "name", "id", "title", "updated", box=None, padding=(0, 2), pad_edge=False)
    for session in state.client.sessions():
        mark = "*" if session["id"] == state.session_id else ""
        updated = session["updated_at"][:19].replace("T", " ")
        table.add_row(mark, Text(session["name"] or ""), session["id"], Text(session["title"] or ""), updated)
    state.console.print(table)


def do_resume(state: ChatState, args: tuple[str, ...]) -> None:
    found = state.client.session_or_none(args[0])
    if found is None:
        raise CommandError(f"/resume {args[0]}: no such session; /sessions lists them, /new {args[0]} creates it")
    switch_to(state, found, existed=True)


def do_new(state: ChatState, args: tuple[str, ...]) -> None:
    try:
        created = state.client.create_session(name=args[0]) if args else state.client.create_session()
    except ApiFailure as exc:
        if exc.status == 409:
            raise CommandError(f"/new {args[0]}: a session has that name; /resume {args[0]} opens it") from None
        raise
    switch_to(state, created, existed=False)


def do_cancel(state: ChatState, _args: tuple[str, ...]) -> None:
    running = [t for t in state.client.turns(state.session_id) if t["status"] in ACTIVE_STATUSES]
    if not running:
        state.say("no turn is running")
        return
    state.client.cancel(str(running[-1]["id"]))
    state.say(f"cancelling turn #{running[-1]['position']}", "yellow")


def do_kernel(state: ChatState, _args: tuple[str, ...]) -> None:
    kernel = state.client.kernel(state.session_id)
    if kernel["live"]:
        idle = "running a turn" if kernel["busy"] else f"idle for {kernel['idle_seconds']:.0f}s"
        memory = human_size(int(kernel["memory_bytes"])) if kernel["memory_bytes"] is not None else "unknown"
        state.say(f"kernel {kernel['sandbox_id']}: live, {idle}, memory {memory}", "green")
    else:
        ended = kernel.get("ended")
        why = f" (the last one ended: {ended['detail']})" if ended else ""
        state.say(f"no live kernel{why}; the next turn starts one", "yellow")
    if kernel["variables"]:
        table = Table("variable", "type", "size", "preview", box=None, padding=(0, 2), pad_edge=False)
        for variable in kernel["variables"]:
            preview_text = variable["preview"] or ""
            table.add_row(
                Text(variable["name"]), Text(variable["type"]), human_size(int(variable["size"])), Text(preview_text)
            )
        state.console.print(table)
    snapshot = kernel.get("snapshot")
    if snapshot:
        lost = ", ".join(f"{item['name']} ({item['reason']})" for item in snapshot["lost"]) or "nothing"
        state.say(
            f"snapshot: {len(snapshot['saved'])} variables, {human_size(int(snapshot['bytes']))}; not kept: {lost}"
        )


def do_restart(state: ChatState, _args: tuple[str, ...]) -> None:
    try:
        state.client.restart_kernel(state.session_id)
    except ApiFailure as exc:
        if exc.status == 409:
            raise CommandError("/restart: a turn is running on the kernel; /cancel it first") from None
        raise
    state.say("kernel restarted: the next turn starts from a fresh Python state", "yellow")


def do_quit(_state: ChatState, _args: tuple[str, ...]) -> None:
    raise Quit


HANDLERS: dict[str, Callable[[ChatState, tuple[str, ...]], None]] = {
    "help": do_help,
    "attach": do_attach,
    "context": do_context,
    "files": do_files,
    "artifacts": do_artifacts,
    "get": do_get,
    "trace": do_trace,
    "mode": do_mode,
    "budget": do_budget,
    "memory": do_memory,
    "sessions": do_sessions,
    "resume": do_resume,
    "new": do_new,
    "cancel": do_cancel,
    "kernel": do_kernel,
    "restart": do_restart,
    "quit": do_quit,
}


def run_command(state: ChatState, command: Command) -> None:
    HANDLERS[command.name](state, command.args)
