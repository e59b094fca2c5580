"""The tools of a turn's sandbox as its code may call them: only allow-listed ones, each call checked.

DSPy and Fleet put host tools into a sandbox's ``tools``; before each execution
:meth:`BridgeGuard.bridge` hands the sandbox a checked copy instead. A tool missing from
:mod:`~fleet_rlm.engine.bridge.allowlist` stops the execution (it is a host bug, not something
sandbox code did). Arguments are checked against the allow-list before the tool runs, and a
failure goes back to the sandbox as Fleet's message or as a scrubbed host error.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dspy.primitives import CodeInterpreterError
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from fleet_rlm.config import Settings
from fleet_rlm.engine.bridge import allowlist as allowed
from fleet_rlm.engine.bridge.facade import FacadeGuard, host_failure, refused
from fleet_rlm.engine.dspy_compat import CALL_TOOL, CONSTRUCT_TOOL
from fleet_rlm.sandbox.tool_calls import ToolError

Tool = Callable[..., Any]


class BridgeGuard:
    """Checked tools for one sandbox; construct and call of one facade share their guard."""

    def __init__(self, secrets: Sequence[str] = ()) -> None:
        self._secrets = tuple(secrets)
        self._plain: dict[str, tuple[Tool, Tool]] = {}  # name -> (original, checked)
        self._facade: FacadeGuard | None = None

    @classmethod
    def for_settings(cls, settings: Settings) -> BridgeGuard:
        """A guard that also redacts every secret in ``settings`` (model API keys, the API token)."""
        return cls(settings.secret_values())

    def bridge(self, tools: Mapping[str, Tool]) -> dict[str, Tool]:
        unknown = sorted(set(tools) - allowed.BRIDGED_TOOLS)
        if unknown:
            raise CodeInterpreterError(
                f"host tool(s) {', '.join(unknown)} are not on Fleet's allow-list of bridged tools; "
                "add them to fleet_rlm/engine/bridge/allowlist.py with the arguments they accept"
            )
        checked = {name: self._checked(name, tool) for name, tool in tools.items() if name in allowed.PLAIN_TOOLS}
        facade = self._facade_guard(tools)
        if facade is not None:
            checked[CONSTRUCT_TOOL] = facade.construct
            checked[CALL_TOOL] = facade.call
        return checked

    def _checked(self, name: str, tool: Tool) -> Tool:
        cached = self._plain.get(name)
        if cached is None or cached[0] is not tool:
            cached = (tool, _checked_tool(name, tool, self._secrets))
            self._plain[name] = cached
        return cached[1]

    def _facade_guard(self, tools: Mapping[str, Tool]) -> FacadeGuard | None:
        construct, call = tools.get(CONSTRUCT_TOOL), tools.get(CALL_TOOL)
        if construct is None and call is None:
            return None
        if construct is None or call is None:
            raise CodeInterpreterError(f"DSPy's facade needs both {CONSTRUCT_TOOL} and {CALL_TOOL}")
        facade = self._facade
        if facade is None or facade.originals[0] is not construct or facade.originals[1] is not call:
            facade = self._facade = FacadeGuard(construct, call, self._secrets)
        return facade


def _checked_tool(name: str, tool: Tool, secrets: Sequence[str]) -> Tool:
    """``tool`` behind the allow-list's argument check; its signature is the allow-list's."""
    spec = allowed.PLAIN_TOOLS[name]
    model = _arguments_model(name)

    def checked(**kwargs: Any) -> Any:
        try:
            arguments = model.model_validate(kwargs)
        except ValidationError as exc:
            usage = allowed.USAGE.get(name)
            raise refused(f"{name}: {_argument_errors(exc)}" + (f". {usage}" if usage else "")) from None
        try:
            return tool(**{key: getattr(arguments, key) for key in kwargs})
        except ToolError:
            raise
        except Exception as exc:
            raise host_failure(exc, secrets) from None

    checked.__name__ = checked.__qualname__ = name
    checked.__doc__ = tool.__doc__
    # run_tool_call names positional arguments by this signature
    checked.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                key,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=inspect.Parameter.empty if default is allowed.REQUIRED else default,
            )
            for key, (_, default) in spec.items()
        ]
    )
    return checked


@functools.cache
def _arguments_model(name: str) -> type[BaseModel]:
    fields: dict[str, Any] = dict(allowed.PLAIN_TOOLS[name])
    return create_model(f"{name}_arguments", __config__=ConfigDict(strict=True, extra="forbid"), **fields)


def _argument_errors(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        if error["type"] == "extra_forbidden":
            parts.append(f"unexpected argument {where!r}")
        elif error["type"] == "missing":
            parts.append(f"missing argument {where!r}")
        else:
            parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts[:5])
