"""What route handlers get injected.

Each dependency is ``async def``: FastAPI runs a plain ``def`` dependency on its thread pool, a hop to
a thread and back for every request (and, in a burst of requests, threads started while they wait).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from fleet_rlm.api.tickets import TicketBook
from fleet_rlm.service.service import FleetService


async def _service(request: Request) -> FleetService:
    service: FleetService = request.app.state.service
    return service


Service = Annotated[FleetService, Depends(_service)]


async def _tickets(request: Request) -> TicketBook:
    tickets: TicketBook = request.app.state.tickets
    return tickets


Tickets = Annotated[TicketBook, Depends(_tickets)]
