"""Text the API accepts: no NUL characters anywhere, refused at the edge with 422 naming the field.

PostgreSQL cannot store U+0000 in text or JSONB (SQLite can); refusing it in every request body
field and path parameter, on both databases, keeps the two alike and a NUL from ever reaching a
query (where PostgreSQL would fail it as a server error).
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import Request
from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from fleet_rlm.api.errors import ApiError
from fleet_rlm.workspace.paths import control_character as control_character  # the routes' check of a path

NUL = "\x00"
NUL_MESSAGE = "text may not contain a NUL character (U+0000)"
T = TypeVar("T")


def nul_location(value: object) -> str | None:
    """Where in ``value`` (a JSON value) a NUL is, as a JSON pointer ("" for the value itself), or None."""
    pending: list[tuple[str, object]] = [("", value)]
    while pending:
        pointer, item = pending.pop()
        if isinstance(item, str):
            if NUL in item:
                return pointer
        elif isinstance(item, dict):
            for key, inner in item.items():
                step = f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}"
                if isinstance(key, str) and NUL in key:
                    return step
                pending.append((step, inner))
        elif isinstance(item, list | tuple):
            pending.extend((f"{pointer}/{index}", inner) for index, inner in enumerate(item))
    return None


def _refuse_nul(value: T) -> T:
    where = nul_location(value)
    if where is None:
        return value
    found = f" (at {where.encode('unicode_escape').decode()})" if where else ""
    # The text goes in the context: a key may hold braces, which a message template would read.
    raise PydanticCustomError("nul_character", "{text}", {"text": f"{NUL_MESSAGE}{found}"})


Text = Annotated[str, AfterValidator(_refuse_nul)]
"""A string without NUL characters."""
JsonObject = Annotated[dict[str, Any], AfterValidator(_refuse_nul)]
"""A JSON object with no NUL character in any key or string inside it."""


async def refuse_nul_in_path(request: Request) -> None:
    """A route dependency: a path parameter holding a NUL (``%00``) is refused, naming it."""
    for name, value in request.path_params.items():
        if isinstance(value, str) and NUL in value:
            raise ApiError(422, "invalid_request", f"{name}: {NUL_MESSAGE}")
