"""Every error the API returns is JSON ``{"code", "message"}`` with a stable code; never a trace."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from fleet_rlm.store import Conflict, Invalid, NotFound, StoreError, TooLarge
from fleet_rlm.store.shared_blobs import BlobMismatch

log = logging.getLogger(__name__)


Responses = dict[int | str, dict[str, Any]]
"""The type of FastAPI's ``responses=`` (documented error bodies)."""
CONNECTION_CLOSE = {
    "Connection": {
        "schema": {"type": "string"},
        "description": "close: the rest of the body (past 1 MiB more) is not read",
    }
}
"""The header of a 413: the server stops reading the body and closes the connection."""


class ErrorBody(BaseModel):
    code: str
    message: str


OPENAI_PREFIX = "/v1/"
"""The OpenAI-compatible routes (:mod:`fleet_rlm.api.routes.compat`): their errors take OpenAI's shape."""
_OPENAI_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 409: "conflict_error"}


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, not_found_error, server_error, ...")
    param: str | None = Field(None, description="The request field that was wrong, when one was")
    code: str = Field(description="Fleet's stable error code (model_not_found, session_not_found, ...)")


class OpenAIErrorBody(BaseModel):
    """OpenAI's error shape, which OpenAI clients and SDKs read."""

    error: OpenAIErrorDetail


def openai_error(status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, *, path: str = ""
) -> JSONResponse:
    """The error as JSON: ``{"code", "message"}``, or OpenAI's shape on the OpenAI-compatible ``path``s."""
    if path.startswith(OPENAI_PREFIX):
        return JSONResponse(openai_error(status, code, message), status_code=status, headers=headers)
    return JSONResponse({"code": code, "message": message}, status_code=status, headers=headers)


_STATUS_OF_CODE = {
    "idempotency_key_reused": 422,
    "invalid_settings": 422,
    "invalid_request": 422,
    "invalid_memory_text": 422,
    "archive_too_large": 413,
    "invalid_archive_field": 422,
    "turn_not_captured": 422,
    "invalid_expectations": 422,
    "invalid_label": 422,
    "turn_active": 409,
    "no_labels": 422,
    "invalid_budget": 422,
    "dataset_min_examples": 422,
    "dataset_min_groups": 422,
    "dataset_split": 422,
    "gate_failed": 409,
}
_HTTP_CODES = {
    400: "malformed_body",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "upload_too_large",
}


async def _store_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StoreError)
    if isinstance(exc, NotFound):
        status = 404
    elif isinstance(exc, Conflict):
        status = 409
    elif isinstance(exc, Invalid):
        status = _STATUS_OF_CODE.get(exc.code, 400)
    else:
        status = 500
    return error_response(status, exc.code, exc.message, path=request.url.path)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors: list[Any] = list(exc.errors())
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        message = f"the request body is not valid JSON: {first.get('msg', '')}"
        return error_response(400, "malformed_json", message, path=request.url.path)
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or "request"
    return error_response(422, "invalid_request", f"{where}: {first.get('msg', 'invalid')}", path=request.url.path)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = getattr(exc, "code", None) or _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
    headers = dict(getattr(exc, "headers", None) or {})
    allowed = request.app.state.methods.allowed(request.scope["path"]) if exc.status_code == 405 else None
    if allowed is not None:
        headers["Allow"] = ", ".join(allowed)
    return error_response(exc.status_code, code, str(exc.detail), headers or None, path=request.url.path)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.headers, path=request.url.path)


async def _too_large(request: Request, exc: Exception) -> JSONResponse:
    return error_response(413, "upload_too_large", f"the upload is {exc}", path=request.url.path)


FILE_DAMAGED: Responses = {
    500: {
        "model": ErrorBody,
        "description": "file_damaged: a session file's bytes shared through the database do not match their "
        "sha256 (worker.file_store = database); nothing is served",
    }
}


async def _damaged(request: Request, exc: Exception) -> JSONResponse:
    log.error("%s %s: %s", request.method, request.url.path, exc)
    return error_response(500, "file_damaged", f"{exc}; the file is not served", path=request.url.path)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    message = "the server failed to handle the request; see its log"
    return error_response(500, "internal_error", message, path=request.url.path)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(StoreError, _store_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(TooLarge, _too_large)
    app.add_exception_handler(BlobMismatch, _damaged)
    app.add_exception_handler(Exception, _unexpected)
