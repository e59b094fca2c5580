"""Commands that work on the local database: a service started for one action, its errors as exits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from fleet_rlm.clients.cli.exit_codes import EXIT_CONFIG, fail
from fleet_rlm.config import ConfigError, load_settings

if TYPE_CHECKING:  # the service loads DSPy and SQLAlchemy: only commands that run pay for them
    from fleet_rlm.service.service import FleetService

T = TypeVar("T")


def with_local_service(action: Callable[[FleetService], Awaitable[T]], *, run_turns: bool = False) -> T:
    """``action``'s result on a service over the configured database, started for it and stopped after.

    With ``run_turns`` it runs the turns the action submits (its own, never another process's queue).
    A configuration error exits 2, a store error 1, each with its message.
    """
    from fleet_rlm.service.service import FleetService
    from fleet_rlm.store import StoreError

    try:
        service = FleetService(load_settings(), serves_queue=False)
    except ConfigError as exc:
        raise fail(str(exc), EXIT_CONFIG) from None

    async def run() -> T:
        await service.start(run_turns=run_turns)
        try:
            return await action(service)
        finally:
            await service.stop()

    try:
        return asyncio.run(run())
    except StoreError as exc:
        raise fail(exc.message) from None
    except ConfigError as exc:
        raise fail(str(exc), EXIT_CONFIG) from None
