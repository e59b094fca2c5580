"""What route handlers get injected."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from fleet_rlm.api.tickets import TicketBook
from fleet_rlm.service.service import FleetService


def _service(request: Request) -> FleetService:
    service: FleetService = request.app.state.service
    return service


Service = Annotated[FleetService, Depends(_service)]


def _tickets(request: Request) -> TicketBook:
    tickets: TicketBook = request.app.state.tickets
    return tickets


Tickets = Annotated[TicketBook, Depends(_tickets)]
