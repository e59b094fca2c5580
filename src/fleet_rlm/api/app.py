"""The HTTP API: FastAPI over :class:`~fleet_rlm.service.service.FleetService`, under ``/api/v1``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, Depends, FastAPI

from fleet_rlm.api.auth import require_token
from fleet_rlm.api.errors import install_error_handlers
from fleet_rlm.api.routes import files, health, sessions, turns
from fleet_rlm.config import Settings
from fleet_rlm.service.service import FleetService

API_PREFIX = "/api/v1"


def create_app(settings: Settings, service: FleetService | None = None) -> FastAPI:
    """The app; it starts the service (migrations, reconciliation, sandbox pool) on start-up."""
    fleet = service or FleetService(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await fleet.start()
        try:
            yield
        finally:
            await fleet.stop()

    app = FastAPI(
        title="Fleet RLM",
        summary="Durable sessions and turns of recursive language models, streamed live.",
        version="1",
        lifespan=lifespan,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
    )
    app.state.service = fleet
    app.state.api_token = settings.api_token.get_secret_value() if settings.api_token else None
    install_error_handlers(app)
    api = APIRouter(prefix=API_PREFIX, dependencies=[Depends(require_token)])
    for module in (health, sessions, files, turns):
        api.include_router(module.router)
    app.include_router(api)
    return app
