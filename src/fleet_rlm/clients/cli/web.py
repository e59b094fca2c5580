"""``fleet web``: open the web workbench in a browser, starting a local server if none runs.

It finds a server the way ``fleet chat`` does (:mod:`fleet_rlm.clients.terminal.server`): a server
already on the configured port is used and left running; otherwise one is started for as long as this
command runs (Ctrl-C stops both).
"""

from __future__ import annotations

import sys
import webbrowser
from typing import Annotated

import typer


def web_command(
    url: Annotated[
        str | None,
        typer.Option("--url", envvar="FLEET_URL", help="A Fleet server's base URL; default: the local one."),
    ] = None,
    open_browser: Annotated[
        bool, typer.Option("--open/--no-open", help="Open the page in the default browser (the BROWSER variable).")
    ] = True,
) -> None:
    """Open the web workbench; starts a local server if none runs (kept until Ctrl-C)."""
    from rich.console import Console

    from fleet_rlm.clients.cli.local_server import connect_or_exit

    _, connection = connect_or_exit(url, Console(highlight=False, stderr=True))
    page = connection.url + "/"
    print(f"Fleet web UI: {page}", flush=True)
    if open_browser and not webbrowser.open(page):
        print("fleet: no browser could be opened; open the address above", file=sys.stderr)
    if not connection.started_here:
        return
    assert connection.process is not None
    print(f"Serving until Ctrl-C (log: {connection.log})", file=sys.stderr, flush=True)
    try:
        connection.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        connection.close()
