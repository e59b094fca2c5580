"""``fleet serve``: the HTTP API on embedded defaults (SQLite under the data directory)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from fleet_rlm.config import ConfigError, load_settings

EXIT_FAILED = 1
EXIT_CONFIG = 2


def serve_command(
    host: Annotated[
        str | None, typer.Option(help="Address to bind (default 127.0.0.1; others need FLEET_API_TOKEN).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on (default 8765).")] = None,
    workers: Annotated[
        bool | None,
        typer.Option(
            "--workers/--no-workers",
            help="Run turns in this process too (the default); --no-workers: only fleet worker processes "
            "run them (PostgreSQL).",
        ),
    ] = None,
) -> None:
    """Run Fleet's HTTP API: durable sessions, turns streamed over SSE."""
    from rich.console import Console

    from fleet_rlm.api.server import check_bind, serve
    from fleet_rlm.clients import web
    from fleet_rlm.clients.cli.preparing import prepare_backend
    from fleet_rlm.sandbox.base import SandboxUnavailable
    from fleet_rlm.sandbox.registry import configured_backend
    from fleet_rlm.store import database_url
    from fleet_rlm.store.database import Database

    try:
        settings = load_settings(server_host=host, server_port=port, worker_in_server=workers)
        check_bind(settings, settings.server.host)
        backend = configured_backend(settings)
        database = Database(database_url(settings))
        display = database.display_url
        if not settings.worker.in_server and database.is_sqlite:
            raise ConfigError(
                "--no-workers (worker.in_server = false) needs PostgreSQL shared with fleet worker processes; "
                "on the embedded SQLite database fleet serve runs turns itself"
            )
    except ConfigError as exc:
        print(f"fleet: error: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_CONFIG) from None
    try:  # built here, with progress, rather than by the server's first sandbox
        prepare_backend(backend, Console(highlight=False, stderr=True))
    except SandboxUnavailable as exc:
        print(f"fleet: error: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_FAILED) from None
    print(
        f"Fleet on http://{settings.server.host}:{settings.server.port}/ (the web UI; the API under /api/v1)  "
        f"(database {display}, data {settings.data_dir})",
        file=sys.stderr,
    )
    serve(settings, ui_routes=web.routes())
