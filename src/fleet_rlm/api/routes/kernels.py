"""A session's kernel: see it, restart it (docs/kernels.md)."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter

from fleet_rlm.api.deps import Kernels
from fleet_rlm.api.errors import ErrorBody, Responses
from fleet_rlm.api.schemas import KernelOut
from fleet_rlm.service.kernels.registry import KernelStatus

router = APIRouter(tags=["kernels"])
NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "No such session"}}


def _out(status: KernelStatus) -> KernelOut:
    fields = dataclasses.asdict(status)
    fields["variables"] = [variable.to_dict() for variable in status.variables]
    return KernelOut.model_validate(fields)


@router.get("/sessions/{session}/kernel", response_model=KernelOut, responses=NOT_FOUND)
async def get_kernel(session: str, kernels: Kernels) -> KernelOut:
    """Whether the session's kernel is live, since when, idle for how long, its memory and variables,
    and its last snapshot (or how the last kernel ended)."""
    return _out(await kernels.status(session))


@router.post(
    "/sessions/{session}/kernel/restart",
    response_model=KernelOut,
    responses={**NOT_FOUND, 409: {"model": ErrorBody, "description": "kernel_busy: a turn of the session is running"}},
)
async def restart_kernel(session: str, kernels: Kernels) -> KernelOut:
    """End the session's kernel and drop its snapshot: the next turn starts from nothing and is told
    which variables are gone (409 while a turn of the session runs). A kernel another process keeps ends there
    before the session's next turn."""
    return _out(await kernels.restart(session))
