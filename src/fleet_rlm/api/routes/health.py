from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from fleet_rlm.api.deps import Kernels, Service
from fleet_rlm.api.schemas import Check, Health, KernelsSummary, Ready

router = APIRouter(tags=["health"])


def _version() -> str:
    try:
        return version("fleet-rlm")
    except PackageNotFoundError:
        return "unknown"


@router.get("/health", response_model=Health)
async def health(kernels: Kernels) -> Health:
    """The process is up; with the session kernels it keeps live and their memory."""
    live, memory = await kernels.summary()
    return Health(version=_version(), kernels=KernelsSummary(live=live, memory_bytes=memory))


@router.get("/ready", response_model=Ready, responses={503: {"model": Ready}})
async def ready(service: Service) -> JSONResponse:
    """The database is reachable and the sandbox backend is usable (503 otherwise); the model endpoint
    is probed and reported too, but does not make the server unready."""
    readiness = await service.readiness()
    body = Ready(
        ready=readiness.ok,
        database=Check(ok=readiness.database.ok, message=readiness.database.message),
        sandbox=Check(ok=readiness.sandbox.ok, message=readiness.sandbox.message),
        model=Check(ok=readiness.model.ok, message=readiness.model.message),
    )
    return JSONResponse(body.model_dump(), status_code=200 if readiness.ok else 503)
