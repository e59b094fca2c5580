"""Running the API with uvicorn (``fleet serve``; also ``python -m fleet_rlm.api.server``)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Sequence
from types import FrameType

import uvicorn
from starlette.routing import BaseRoute

from fleet_rlm.api.app import create_app
from fleet_rlm.api.hosts import is_loopback_name
from fleet_rlm.config import ConfigError, Settings, load_settings
from fleet_rlm.logs import logs_on_a_thread
from fleet_rlm.service.service import FleetService

GRACEFUL_SHUTDOWN_SECONDS = 5
STARTUP_FAILURE = 3
"""The exit status when the server could not start (uvicorn's own)."""
log = logging.getLogger(__name__)


class ShutdownAwareServer(uvicorn.Server):
    """uvicorn's server, telling the service the moment a signal starts the shutdown: the streams it
    then cuts were not left by their clients (an OpenAI-compatible or MCP call cut off this way does
    not cancel its turn, which drains or ends interrupted with the rest). A second signal cuts the
    drain short."""

    def __init__(self, config: uvicorn.Config, service: FleetService) -> None:
        super().__init__(config)
        self._service = service

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit:
            self._service.cut_drain()
        else:
            self._service.begin_shutdown()
        super().handle_exit(sig, frame)


def is_loopback(host: str) -> bool:
    return is_loopback_name(host.strip("[]").lower())


def check_bind(settings: Settings, host: str) -> None:
    """Binding anything but loopback exposes the API: require a token then (an empty one is none)."""
    if not is_loopback(host) and settings.server.api_token is None:
        raise ConfigError(
            f"refusing to listen on {host}: it is not a loopback address, so set FLEET_API_TOKEN "
            "(clients then send 'Authorization: Bearer <token>'), or bind 127.0.0.1"
        )


def server_settings(settings: Settings) -> Settings:
    """A server refuses sandboxes it cannot bound unless sandbox_require_limits is set false."""
    if settings.sandbox.require_limits is None:
        return settings.with_values({"sandbox_require_limits": True})
    return settings


def serve(
    settings: Settings, host: str | None = None, port: int | None = None, ui_routes: Sequence[BaseRoute] = ()
) -> None:
    host = host or settings.server.host
    port = port or settings.server.port
    check_bind(settings, host)
    settings = server_settings(settings)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not is_loopback(host) and not settings.server.allowed_hosts:
        log.warning(
            "listening on %s, but only requests naming a loopback host are answered (others get 421): "
            "list the names clients use for this server in FLEET_ALLOWED_HOSTS",
            host,
        )
    service = FleetService(settings)
    config = uvicorn.Config(
        create_app(settings, service, ui_routes, freeze_start_up=True, drain_on_shutdown=True),
        host=host,
        port=port,
        log_level="info",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    server = ShutdownAwareServer(config, service)
    with logs_on_a_thread(), contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:  # as uvicorn.run ends when it could not start (the port is taken, say)
        sys.exit(STARTUP_FAILURE)


def main(argv: list[str] | None = None, ui_routes: Sequence[BaseRoute] = ()) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleet_rlm.api.server", description="Run Fleet's HTTP API.")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    args = parser.parse_args(argv)
    try:
        serve(load_settings(), args.host, args.port, ui_routes)
    except ConfigError as exc:
        print(f"fleet serve: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
