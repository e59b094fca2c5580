"""The HTTP API: FastAPI over :class:`~fleet_rlm.service.service.FleetService`, under ``/api/v1``.

Each rule every request meets lives in one module (docs/security.md, section API): the Host check
(:mod:`~fleet_rlm.api.hosts`), the Origin check and CORS (:mod:`~fleet_rlm.api.origins`), body limits
(:mod:`~fleet_rlm.api.body_limits`), the token and stream tickets (:mod:`~fleet_rlm.api.auth`), and
the access log's redaction (:mod:`~fleet_rlm.api.access_log`). Middleware runs outermost first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import APIRouter, Depends, FastAPI
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from fleet_rlm import heap
from fleet_rlm.api import access_log, contract, docs
from fleet_rlm.api.auth import require_token
from fleet_rlm.api.body_limits import BodyLimitMiddleware, route_limits
from fleet_rlm.api.errors import install_error_handlers
from fleet_rlm.api.hosts import HostCheckMiddleware
from fleet_rlm.api.mcp_http import McpEndpoint
from fleet_rlm.api.methods import MethodTable
from fleet_rlm.api.origins import OriginCheckMiddleware
from fleet_rlm.api.routes import compat, files, health, kernels, memory, quality, sessions, turns
from fleet_rlm.api.text import refuse_nul_in_path
from fleet_rlm.api.tickets import TicketBook
from fleet_rlm.config import Settings
from fleet_rlm.quality.runs import QualityRuns
from fleet_rlm.service.service import FleetService

API_PREFIX = "/api/v1"


def create_app(
    settings: Settings,
    service: FleetService | None = None,
    ui_routes: Sequence[BaseRoute] = (),
    *,
    freeze_start_up: bool = False,
    drain_on_shutdown: bool = False,
) -> FastAPI:
    """The app; it starts the service (migrations, reconciliation, sandbox pool) on start-up.

    ``freeze_start_up`` (a server process of its own, not an app inside tests): once started, the
    process's objects are set aside from the garbage collector (:func:`fleet_rlm.heap.freeze_start_up`).

    ``drain_on_shutdown`` (the server command): at shutdown the turns the process runs get
    :attr:`FleetService.shutdown_drain_seconds` to finish (on PostgreSQL), as ``fleet worker`` gives them.

    ``ui_routes`` serve a user interface beside the API, outside ``/api`` and outside its OpenAPI
    document (``fleet serve`` passes the web workbench's, :mod:`fleet_rlm.clients.web`: the API layer
    cannot import clients). They meet the same Host and Origin checks; they need no token, since a
    browser cannot send one on navigation (the page asks for it and sends it on each API call)."""
    fleet = service or FleetService(settings)
    mcp = McpEndpoint(fleet)
    server = settings.server
    token = server.api_token.get_secret_value() if server.api_token else None

    runs = QualityRuns(fleet)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await fleet.start()
        if freeze_start_up:
            heap.freeze_start_up()
        try:
            async with mcp.running():
                yield
        finally:
            await runs.close()
            await fleet.stop(drain=fleet.shutdown_drain_seconds if drain_on_shutdown else 0.0)

    app = FastAPI(
        title="Fleet RLM",
        summary="Durable sessions and turns of recursive language models, streamed live.",
        version="1",
        lifespan=lifespan,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        middleware=[
            Middleware(HostCheckMiddleware, allowed_hosts=server.allowed_hosts),
            Middleware(OriginCheckMiddleware, cors_origins=server.cors_origins),
            Middleware(BodyLimitMiddleware, limit_for=route_limits(server, API_PREFIX)),
        ],
    )
    app.state.service = fleet
    app.state.quality_runs = runs
    app.state.api_token = token
    app.state.tickets = TicketBook(token)
    access_log.install(token)
    install_error_handlers(app)
    contract.install(app)
    api = APIRouter(prefix=API_PREFIX, dependencies=[Depends(require_token), Depends(refuse_nul_in_path)])
    routers = [module.router for module in (health, sessions, kernels, files, turns, memory, quality, docs)]
    for router in routers:
        api.include_router(router)
    app.include_router(api)
    app.include_router(compat.router, dependencies=[Depends(require_token)])
    app.router.routes.append(mcp.route)
    app.router.routes.extend(ui_routes)
    served = [(API_PREFIX, route) for router in routers for route in router.routes]
    app.state.methods = MethodTable([*served, *(("", route) for route in compat.router.routes)])
    return app
