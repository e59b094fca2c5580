"""Running one host tool call that sandbox code made, and reporting it to the observer."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import keyword
import reprlib
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from dspy.primitives import CodeInterpreterError

from fleet_rlm.sandbox.base import InvalidInterpreterInput, SandboxObserver
from fleet_rlm.sandbox.protocol import encode_message

RESERVED_TOOL_NAMES = frozenset({"SUBMIT", "__builtins__"})
PREVIEW_CHARS = 200
_CALL_PREFIX = uuid.uuid4().hex[:8]  # call ids are unique across processes, cheap within one
_call_numbers = itertools.count(1)

ToolInvoker = Callable[[str, list[Any], dict[str, Any]], Any]
"""Calls one host tool by name with the arguments sandbox code gave: ``(tool_name, args, kwargs)``."""

_preview_repr = reprlib.Repr()
_preview_repr.maxstring = 80
_preview_repr.maxother = 80
_preview_repr.maxlist = _preview_repr.maxtuple = _preview_repr.maxdict = 5
_preview_repr.maxlevel = 3


class ToolError(Exception):
    """A tool failure whose message is already written for the sandbox code: it is sent as it is,
    without the exception's type name (other exceptions are sent as ``Type: message``)."""


def check_tool_names(tools: Mapping[str, Any]) -> None:
    invalid = [
        name
        for name in tools
        if not isinstance(name, str)
        or not name.isidentifier()
        or keyword.iskeyword(name)
        or name in RESERVED_TOOL_NAMES
    ]
    if invalid:
        raise InvalidInterpreterInput(
            f"tool names must be Python identifiers other than SUBMIT; invalid names: {invalid!r}"
        )


def preview(args: list[Any], kwargs: dict[str, Any]) -> str:
    """A short, cheap rendering of a call's arguments (a 50 MB argument is not copied)."""
    parts = [_preview_repr.repr(value) for value in args]
    parts += [f"{key}={_preview_repr.repr(value)}" for key, value in kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 3] + "..."


def invoke(tools: Mapping[str, Callable[..., Any]], name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Call the tool ``name`` of ``tools`` as sandbox code called it; a coroutine's result is awaited."""
    tool = tools.get(name)
    if tool is None:
        raise CodeInterpreterError(f"Unknown tool: {name}")
    value = _call(tool, args, kwargs)
    if inspect.isawaitable(value):
        value = asyncio.run(_awaited(value))
    return value


def run_tool_call(
    tools: Mapping[str, Callable[..., Any]],
    request: dict[str, Any],
    observer: SandboxObserver,
    invoker: ToolInvoker | None = None,
) -> bytes:
    """Call the tool ``request`` names and return the encoded reply (``tool_result`` or ``tool_error``).

    ``invoker`` makes the call (the sandbox's ``invoke_tool``, which fires DSPy's callbacks); by
    default the tool is looked up in ``tools``."""
    name = str(request.get("name"))
    args = request.get("args") or []
    kwargs = request.get("kwargs") or {}
    call_id = f"{_CALL_PREFIX}-{next(_call_numbers)}"
    observer.tool_started(call_id, name, preview(args, kwargs))
    started = time.monotonic()
    error: str | None = None
    try:
        value = invoker(name, args, kwargs) if invoker is not None else invoke(tools, name, args, kwargs)
        try:
            reply = encode_message({"type": "tool_result", "id": request["id"], "value": value})
        except (TypeError, ValueError) as exc:
            raise TypeError(f"tool {name!r} returned a value that is not JSON-compatible: {exc}") from exc
    except BaseException as exc:  # the sandbox code sees every tool failure as a RuntimeError
        error = str(exc) if isinstance(exc, ToolError) else f"{type(exc).__name__}: {exc}"
        reply = encode_message({"type": "tool_error", "id": request["id"], "error": error})
    finally:
        observer.tool_finished(call_id, name, time.monotonic() - started, error)
    return reply


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _call(tool: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Call ``tool``, naming positional arguments by its signature when it takes no ``*args``.

    DSPy wraps user tools as ``invoke(**kwargs)`` and exposes the real signature as
    ``__signature__``, so a positional call from sandbox code (``spawn_agent('task')``) must arrive
    by name.
    """
    if not args:
        return tool(**kwargs)
    try:
        signature = inspect.signature(tool)
    except (TypeError, ValueError):
        return tool(*args, **kwargs)
    positional_kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY)
    if any(p.kind in positional_kinds for p in signature.parameters.values()):
        return tool(*args, **kwargs)
    arguments = dict(signature.bind(*args, **kwargs).arguments)
    for name, parameter in signature.parameters.items():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD and name in arguments:
            arguments.update(arguments.pop(name))
    return tool(**arguments)
