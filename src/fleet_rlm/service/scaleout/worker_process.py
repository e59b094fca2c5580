"""``fleet worker``: a process that runs turns other Fleet processes queued in the shared PostgreSQL
database, until SIGTERM (or SIGINT) drains it (docs/deploy.md)."""

from __future__ import annotations

import asyncio
import logging
import signal

from fleet_rlm import heap
from fleet_rlm.config import ConfigError, Settings
from fleet_rlm.service.service import FleetService
from fleet_rlm.store import Database

log = logging.getLogger(__name__)


def check_worker_database(database: Database) -> None:
    if database.is_sqlite:
        raise ConfigError(
            "fleet worker needs a PostgreSQL database shared with the API (FLEET_DATABASE_URL="
            "postgresql+asyncpg://...); on the embedded SQLite database fleet serve runs turns itself"
        )


async def run_worker(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """Claim and run queued turns until ``stop`` is set or a SIGTERM/SIGINT arrives; then claim no more,
    give running turns ``worker.drain_seconds`` to finish (a second signal cuts that short), and end the
    rest ``interrupted``."""
    database = Database.from_settings(settings)
    check_worker_database(database)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    service = FleetService(settings, database=database, runs_turns=True)

    def on_signal() -> None:  # the first drains; a second cuts the drain short
        if stop.is_set():
            service.cut_drain()
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)
    await service.start()
    heap.freeze_start_up()
    log.info("worker %s runs turns from %s", service.parts.runner, database.display_url)
    try:
        await stop.wait()
    finally:
        await service.stop(drain=settings.worker.drain_seconds)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        log.info("worker %s stopped", service.parts.runner)
