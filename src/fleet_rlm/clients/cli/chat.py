"""The ``fleet chat`` command. Only the signature lives here: the client itself (prompt_toolkit,
httpx, ...) is imported when the command runs, so other ``fleet`` commands do not pay for it."""

from __future__ import annotations

import contextlib
import sys
from typing import Annotated

import typer

EXIT_UNREACHABLE = 1
EXIT_CONFIG = 2
EXIT_INTERRUPTED = 130


def chat_command(
    session: Annotated[
        str | None, typer.Option("--session", "-s", help="Resume this session (name or id); a new name creates it.")
    ] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", envvar="FLEET_URL", help="A Fleet server's base URL; default: the local one."),
    ] = None,
) -> None:
    """Chat with Fleet: tasks stream live; /help lists the commands."""
    from rich.console import Console

    from fleet_rlm.clients.terminal.repl import repl
    from fleet_rlm.clients.terminal.server import ConnectError, connect
    from fleet_rlm.config import ConfigError, load_settings

    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"fleet: error: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_CONFIG) from None
    console = Console(highlight=False)
    if url is None:  # a server this chat may start needs the sandbox environment: built here, with progress
        from fleet_rlm.clients.cli.preparing import prepare_local_environment

        failed = prepare_local_environment(settings, console)
        if failed:
            print(f"fleet: error: {failed}", file=sys.stderr)
            raise typer.Exit(EXIT_UNREACHABLE)
    try:
        with console.status("connecting…") if url is None else contextlib.nullcontext():
            connection = connect(settings, url)
    except ConnectError as exc:
        print(f"fleet: error: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_UNREACHABLE) from None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    try:
        code = repl(settings, connection, session, console)
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    finally:
        connection.close()
    console.print("bye", style="dim")
    raise typer.Exit(code)
