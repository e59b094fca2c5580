"""``/api/v1/openapi.json`` and ``/api/v1/docs`` as routes of the API, so they need the token like
every other route (FastAPI's own would be public)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

router = APIRouter(include_in_schema=False)


@router.get("/openapi.json")
async def openapi_document(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/docs")
async def interactive_docs(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(openapi_url="openapi.json", title=f"{request.app.title} API")
