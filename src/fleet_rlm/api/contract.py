"""What the OpenAPI document says about the rules every route shares (host, origin, token, body
size, malformed and invalid requests), added to each operation so that every status the server
sends is documented where it can occur (a schemathesis run checks it: docs/testing.md)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from fleet_rlm.api.compat_schemas import add_chunk_schema
from fleet_rlm.api.errors import CONNECTION_CLOSE, OPENAI_PREFIX
from fleet_rlm.api.event_schemas import add_event_schemas

ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
STATE_CHANGING = frozenset({"post", "put", "patch", "delete"})

DESCRIPTION = """\
Rules every route shares (see docs/api.md and docs/security.md):

- **Host.** Only loopback names and the names in `FLEET_ALLOWED_HOSTS` are served; any other `Host`
  gets 421 `host_not_allowed` (this stops DNS rebinding).
- **Origin.** A POST, PUT, PATCH or DELETE from a browser page of another origin gets 403
  `origin_not_allowed`, unless that origin is in `FLEET_CORS_ORIGINS`; those origins also get CORS
  headers (`Access-Control-Allow-Origin`, `Access-Control-Expose-Headers`, `Vary: Origin`) and answered
  preflights.
- **Token.** With `FLEET_API_TOKEN` set, every route (these documents too) needs
  `Authorization: Bearer <token>`, else 401 `unauthorized`. The token is never accepted in a URL; a
  browser's EventSource uses a stream ticket (`POST /api/v1/turns/{turn_id}/events/ticket`).
- **Bodies** are bounded while they stream: JSON bodies by `FLEET_JSON_BODY_LIMIT_KB`, uploads by
  `FLEET_UPLOAD_LIMIT_MB`, archives by `FLEET_IMPORT_LIMIT_MB`; past the limit, 413 with
  `Connection: close` (at most 1 MiB more is read and dropped first, so the client can read it).
"""


def _error(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": ERROR}
    if headers:
        response["headers"] = headers
    return response


UNAUTHORIZED = _error(
    "FLEET_API_TOKEN is set and the token (or stream ticket) is missing or wrong",
    {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}},
)
HOST_NOT_ALLOWED = _error("The Host header names a host this server does not serve (FLEET_ALLOWED_HOSTS)")
ORIGIN_NOT_ALLOWED = _error("Sent by a browser page of another origin not in FLEET_CORS_ORIGINS")
BODY_TOO_LARGE = _error("The request body is larger than FLEET_JSON_BODY_LIMIT_KB (body_too_large)", CONNECTION_CLOSE)
MALFORMED_JSON = _error("malformed_json: the body is not valid JSON")
INVALID_REQUEST = _error(
    "invalid_request: a parameter or field is missing, of the wrong type, out of range or holds a NUL "
    "character (the message names it)"
)
OPENAI_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/OpenAIErrorBody"}}}
"""The error body of the OpenAI-compatible routes (under ``/v1/``)."""


def _in_openai_shape(response: dict[str, Any]) -> dict[str, Any]:
    return {**response, "content": OPENAI_ERROR}


FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")
"""FastAPI's own 422 body, which this API never sends (its errors are ErrorBody)."""


def _is_fastapi_validation_error(response: dict[str, Any]) -> bool:
    schema = response.get("content", {}).get("application/json", {}).get("schema", {})
    return bool(schema.get("$ref", "").endswith("/HTTPValidationError"))


def _has_json_body(operation: dict[str, Any]) -> bool:
    return "application/json" in operation.get("requestBody", {}).get("content", {})


def add_shared_rules(document: dict[str, Any]) -> dict[str, Any]:
    document["info"]["description"] = DESCRIPTION
    schemes = document.setdefault("components", {}).setdefault("securitySchemes", {})
    schemes["bearer"] = {
        "type": "http",
        "scheme": "bearer",
        "description": "FLEET_API_TOKEN, when the server has one (then required everywhere)",
    }
    document["security"] = [{"bearer": []}, {}]
    for path, operations in document["paths"].items():
        shaped = _in_openai_shape if path.startswith(OPENAI_PREFIX) else (lambda response: response)
        for method, operation in operations.items():
            responses = operation["responses"]
            responses.setdefault("401", shaped(UNAUTHORIZED))
            responses.setdefault("421", shaped(HOST_NOT_ALLOWED))
            if method in STATE_CHANGING:
                responses.setdefault("403", shaped(ORIGIN_NOT_ALLOWED))
            responses.setdefault("413", shaped(BODY_TOO_LARGE))
            if _has_json_body(operation):
                responses.setdefault("400", shaped(MALFORMED_JSON))
            if "422" in responses and _is_fastapi_validation_error(responses["422"]):
                responses["422"] = shaped(INVALID_REQUEST)
    for name in FASTAPI_VALIDATION_SCHEMAS:
        document["components"].get("schemas", {}).pop(name, None)
    return document


def install(app: FastAPI) -> None:
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            add_chunk_schema(add_event_schemas(add_shared_rules(generate())))
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
