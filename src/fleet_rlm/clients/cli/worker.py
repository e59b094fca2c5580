"""``fleet worker``: runs the turns that API replicas queue in a shared PostgreSQL database."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
from typing import Annotated

import typer

from fleet_rlm.clients.cli.exit_codes import EXIT_CONFIG, EXIT_FAILED, fail
from fleet_rlm.config import ConfigError, load_settings


def worker_command(
    processes: Annotated[
        int,
        typer.Option(min=1, help="Worker processes to run (each claims turns; the engine's CPU spreads over them)."),
    ] = 1,
) -> None:
    """Run turns queued in the shared database (PostgreSQL) until SIGTERM, which drains: no new turns,
    running ones finish."""
    from rich.console import Console

    from fleet_rlm.api.server import server_settings
    from fleet_rlm.clients.cli.preparing import prepare_backend
    from fleet_rlm.sandbox.base import SandboxUnavailable
    from fleet_rlm.sandbox.registry import configured_backend
    from fleet_rlm.service.scaleout.worker_process import check_worker_database, run_worker
    from fleet_rlm.store import Database

    try:
        settings = server_settings(load_settings())
        check_worker_database(Database.from_settings(settings))
        backend = configured_backend(settings)
    except ConfigError as exc:
        raise fail(str(exc), EXIT_CONFIG) from None
    try:
        prepare_backend(backend, Console(highlight=False, stderr=True))
    except SandboxUnavailable as exc:
        raise fail(str(exc), EXIT_FAILED) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if processes > 1:
        raise typer.Exit(_run_children(processes))
    asyncio.run(run_worker(settings))


def _run_children(count: int) -> int:
    """Run ``count`` single-process workers; SIGTERM/SIGINT reach each (each drains); exit once all did."""
    command = [sys.executable, "-m", "fleet_rlm", "worker", "--processes", "1"]
    children = [subprocess.Popen(command) for _ in range(count)]

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [child.wait() for child in children]
    return max(codes, default=0)
