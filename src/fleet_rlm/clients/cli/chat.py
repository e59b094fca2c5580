"""The ``fleet chat`` command. Only the signature lives here: the client itself (prompt_toolkit,
httpx, ...) is imported when the command runs, so other ``fleet`` commands do not pay for it."""

from __future__ import annotations

from typing import Annotated

import typer

from fleet_rlm.clients.cli.exit_codes import EXIT_CANCELLED


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

    from fleet_rlm.clients.cli.local_server import connect_or_exit
    from fleet_rlm.clients.terminal.repl import repl

    console = Console(highlight=False)
    try:
        settings, connection = connect_or_exit(url, console, status=True)
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_CANCELLED) from None
    try:
        code = repl(settings, connection, session, console)
    except KeyboardInterrupt:
        code = EXIT_CANCELLED
    finally:
        connection.close()
    console.print("bye", style="dim")
    raise typer.Exit(code)
