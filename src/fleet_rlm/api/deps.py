"""What route handlers get injected.

Each dependency is ``async def``: FastAPI runs a plain ``def`` dependency on its thread pool, a hop to
a thread and back for every request (and, in a burst of requests, threads started while they wait).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from fleet_rlm.api.tickets import TicketBook
from fleet_rlm.service.archive.service import ArchiveService
from fleet_rlm.service.file_service import FileService
from fleet_rlm.service.kernels.service import KernelService
from fleet_rlm.service.memory import MemoryBook
from fleet_rlm.service.quality_data import QualityData
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.sessions import SessionService
from fleet_rlm.service.turns.service import TurnService


async def _service(request: Request) -> FleetService:
    service: FleetService = request.app.state.service
    return service


Service = Annotated[FleetService, Depends(_service)]
"""The whole service: for a route that needs its settings or hands it on (a quality run)."""


async def _sessions(request: Request) -> SessionService:
    return (await _service(request)).sessions


async def _files(request: Request) -> FileService:
    return (await _service(request)).files


async def _turns(request: Request) -> TurnService:
    return (await _service(request)).turns


async def _kernels(request: Request) -> KernelService:
    return (await _service(request)).kernels


async def _archives(request: Request) -> ArchiveService:
    return (await _service(request)).archives


async def _memory(request: Request) -> MemoryBook:
    return (await _service(request)).memory


async def _quality(request: Request) -> QualityData:
    return (await _service(request)).quality


Sessions = Annotated[SessionService, Depends(_sessions)]
Files = Annotated[FileService, Depends(_files)]
Turns = Annotated[TurnService, Depends(_turns)]
Kernels = Annotated[KernelService, Depends(_kernels)]
Archives = Annotated[ArchiveService, Depends(_archives)]
Memory = Annotated[MemoryBook, Depends(_memory)]
Quality = Annotated[QualityData, Depends(_quality)]


async def _tickets(request: Request) -> TicketBook:
    tickets: TicketBook = request.app.state.tickets
    return tickets


Tickets = Annotated[TicketBook, Depends(_tickets)]
