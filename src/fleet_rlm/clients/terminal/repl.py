"""``fleet chat``: read a line, run it (a slash command or a task), repeat.

Every failure a person can cause or meet (a bad command, a server error, a lost connection) is
reported on one line and the chat goes on; only /quit, Ctrl-D, or a second Ctrl-C while a turn is
being cancelled end it. The server the chat started, if any, is stopped on the way out.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import httpx
from prompt_toolkit.formatted_text import HTML
from rich.console import Console
from rich.text import Text

from fleet_rlm.api.client import ApiFailure
from fleet_rlm.clients.cli.exit_codes import EXIT_CONFIG
from fleet_rlm.clients.terminal.actions import (
    ChatState,
    Quit,
    open_session,
    run_command,
    send_message,
    show_history,
)
from fleet_rlm.clients.terminal.client import ChatClient, DigestMismatch
from fleet_rlm.clients.terminal.commands import Command, CommandError, Message, parse_line
from fleet_rlm.clients.terminal.completion import ChatCompleter
from fleet_rlm.clients.terminal.prompt import make_prompt
from fleet_rlm.clients.terminal.server import Connection
from fleet_rlm.clients.terminal.stream import QuitRequested, StreamLost
from fleet_rlm.config import Settings


def _prompt_text(state: ChatState) -> HTML:
    context = f" +{len(state.context_paths)} ctx" if state.context_paths else ""
    return HTML(f"<ansicyan>fleet</ansicyan>:<b>{_html(state.label)}</b>{context}&gt; ")


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _run_line(state: ChatState, line: str) -> None:
    parsed = parse_line(line)
    if parsed is None:
        return
    if isinstance(parsed, Message):
        send_message(state, parsed.text)
    elif isinstance(parsed, Command):
        run_command(state, parsed)


def handle_line(state: ChatState, line: str) -> bool:
    """Run one typed line; False when the chat should end."""
    return _guarded(state, functools.partial(_run_line, state, line))


def _guarded(state: ChatState, action: Callable[[], None]) -> bool:
    """Run ``action``, reporting any failure in one line; False when the chat should end."""
    console = state.console
    try:
        action()
    except (Quit, QuitRequested):
        return False
    except CommandError as exc:
        console.print(Text(str(exc), style="yellow"))
    except ApiFailure as exc:
        console.print(Text(f"✗ {exc.message}", style="red"))
    except DigestMismatch as exc:
        console.print(Text(f"✗ {exc}", style="red"))
    except (StreamLost, httpx.TransportError) as exc:
        console.print(Text(f"✗ cannot reach the server at {state.client.base_url}: {exc}", style="red"))
    except OSError as exc:
        console.print(Text(f"✗ {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), style="red"))
    except KeyboardInterrupt:
        console.print(Text("interrupted", style="yellow"))
    except Exception as exc:  # a bug must not end the session the person is working in
        console.print(Text(f"✗ internal error: {type(exc).__name__}: {exc} (please report it)", style="red"))
    return True


def repl(settings: Settings, connection: Connection, session_ref: str | None, console: Console) -> int:
    client = ChatClient(connection.url, token=connection.token, timeout=60.0)
    try:
        try:
            session, existed = open_session(client, session_ref)
        except (CommandError, ApiFailure) as exc:
            print(f"fleet: error: {getattr(exc, 'message', exc)}", file=sys.stderr)
            return EXIT_CONFIG
        state = ChatState(client, console, session)
        completer = ChatCompleter(
            remote_paths=lambda: [f["path"] for f in client.files(state.session_id)],
            sessions=lambda: [s["name"] or s["id"] for s in client.sessions()],
        )
        state.on_files_changed = completer.remote_paths.invalidate
        where = "a server started for this chat" if connection.started_here else connection.url
        console.print(Text(f"Fleet chat on {where}. /help lists commands; Ctrl-D leaves.", style="dim"))
        if existed:
            if not _guarded(state, lambda: show_history(state)):
                return 0
        else:
            console.print(Text(f"new session {state.label}", style="dim"))
        prompt = make_prompt(settings, completer)
        while True:
            try:
                line = prompt.prompt(_prompt_text(state))
            except KeyboardInterrupt:
                console.print(Text("(Ctrl-D or /quit leaves)", style="dim"))
                continue
            except EOFError:
                break
            if not handle_line(state, line):
                break
        return 0
    finally:
        client.close()
