"""``fleet mcp``: Fleet's MCP server over stdio, for MCP hosts that start it as a subprocess.

It runs turns itself, like ``fleet serve`` (on the same local database and data directory, so its
sessions are the server's), and writes nothing but MCP messages on stdout: logs go to stderr.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from fleet_rlm.clients.cli.exit_codes import EXIT_CONFIG, EXIT_FAILED, fail
from fleet_rlm.config import ConfigError, load_settings


def mcp_command() -> None:
    """Serve Fleet's tools (run_task, read_file, upload_file, ...) to an MCP host over stdio."""
    from fleet_rlm.api.mcp_server import build_mcp_server
    from fleet_rlm.sandbox.base import SandboxUnavailable
    from fleet_rlm.service.service import FleetService

    try:
        settings = load_settings()
    except ConfigError as exc:
        raise fail(str(exc), EXIT_CONFIG) from None
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)

    async def run() -> None:
        service = FleetService(settings, serves_queue=False)  # it ends with its host: others' turns are not its to take
        await service.start()
        try:
            await build_mcp_server(service).run_stdio_async()
        finally:
            await service.stop()

    try:
        asyncio.run(run())
    except SandboxUnavailable as exc:
        raise fail(str(exc), EXIT_FAILED) from None
    except KeyboardInterrupt:
        pass
