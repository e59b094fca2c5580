"""Reaching a server for ``fleet chat`` and ``fleet web``: the one at ``--url``, or the local one,
started for as long as the command runs when none runs (:mod:`fleet_rlm.clients.terminal.server`)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from fleet_rlm.clients.cli.exit_codes import EXIT_CONFIG, EXIT_FAILED, fail

if TYPE_CHECKING:  # both load httpx and the settings: only the command that runs pays for them
    from rich.console import Console

    from fleet_rlm.clients.terminal.server import Connection
    from fleet_rlm.config import Settings


def connect_or_exit(url: str | None, console: Console, *, status: bool = False) -> tuple[Settings, Connection]:
    """The settings and a connection to the server at ``url`` (None: the local one).

    A local server this may start needs the sandbox environment, built first with progress on
    ``console``; ``status`` shows a spinner while connecting. A bad configuration exits 2, a server
    that cannot be reached or started 1, each with its message.
    """
    from fleet_rlm.clients.cli.preparing import prepare_local_environment
    from fleet_rlm.clients.terminal.server import ConnectError, connect
    from fleet_rlm.config import ConfigError, load_settings

    try:
        settings = load_settings()
    except ConfigError as exc:
        raise fail(str(exc), EXIT_CONFIG) from None
    if url is None:
        failed = prepare_local_environment(settings, console)
        if failed:
            raise fail(failed, EXIT_FAILED)
    try:
        with console.status("connecting…") if status and url is None else contextlib.nullcontext():
            return settings, connect(settings, url)
    except ConnectError as exc:
        raise fail(str(exc), EXIT_FAILED) from None
