"""The ``Allow`` header of a 405: exactly the methods the OpenAPI document gives the path.

Each method of a path is its own route here, and Starlette's 405 names only the first route whose
path matched. This table groups the documented routes by path template; a request's path takes the
template OpenAPI would match it to (a concrete path such as ``/sessions/import`` before a templated
one such as ``/sessions/{session}``, then the one with fewer parameters).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, compile_path


@dataclass(frozen=True)
class _PathItem:
    regex: re.Pattern[str]
    parameters: int
    methods: frozenset[str]


class MethodTable:
    def __init__(self, routes: Iterable[tuple[str, BaseRoute]]) -> None:
        """``routes``: each route with the prefix it is served under."""
        methods: dict[str, set[str]] = {}
        for prefix, route in routes:
            if isinstance(route, APIRoute) and route.include_in_schema:
                methods.setdefault(prefix + route.path, set()).update(route.methods or ())
        self._items: list[_PathItem] = []
        for path, names in methods.items():
            regex, _, convertors = compile_path(path)
            self._items.append(_PathItem(regex, len(convertors), frozenset(names)))

    def allowed(self, path: str) -> list[str] | None:
        """The documented methods of the path item ``path`` falls under; None if it is not documented."""
        matching = [item for item in self._items if item.regex.match(path)]
        if not matching:
            return None
        return sorted(min(matching, key=lambda item: item.parameters).methods)
