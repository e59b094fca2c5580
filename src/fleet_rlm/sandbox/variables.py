"""Which input variables to send to the worker: only those that changed since the last execution.

``dspy.RLM`` passes every input on every iteration. The worker keeps what it was sent, so an
unchanged input costs nothing to resend: an immutable value (str, bytes, numbers, bool, None,
tuples of those) is recognised by identity (or cheap equality), anything else by a digest of its
JSON encoding.
"""

from __future__ import annotations

import base64
import hashlib
import json
import keyword
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleet_rlm.sandbox.base import InvalidInterpreterInput

RESERVED_NAMES = frozenset({"SUBMIT", "__builtins__"})
_SCALARS = (str, bytes, int, float, bool, type(None))


@dataclass(frozen=True)
class _Held:
    """What the worker holds for one variable: the object itself (immutable) or a digest."""

    reference: Any = None
    digest: bytes | None = None


@dataclass
class VariablePlan:
    """The variables part of one execute message, and the cache state to keep once it is sent."""

    encoded: dict[str, bytes] = field(default_factory=dict)  # name -> JSON bytes of the new value
    encoded_bytes: dict[str, str] = field(default_factory=dict)  # name -> base64 of a bytes value
    reuse: list[str] = field(default_factory=list)
    forget: list[str] = field(default_factory=list)
    _next: dict[str, _Held] = field(default_factory=dict)


class VariableCache:
    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    def plan(self, variables: Mapping[str, Any], tool_names: set[str]) -> VariablePlan:
        """Work out what to send; raises InvalidInterpreterInput for a bad name or a non-JSON value."""
        check_names(variables, tool_names)
        plan = VariablePlan(forget=[name for name in self._held if name not in variables])
        for name, value in variables.items():
            held = self._held.get(name)
            if _is_immutable(value):
                if held is not None and _same_immutable(held.reference, value):
                    plan.reuse.append(name)
                    plan._next[name] = _Held(reference=value)
                    continue
                plan._next[name] = _Held(reference=value)
                if isinstance(value, bytes):
                    plan.encoded_bytes[name] = base64.b64encode(value).decode("ascii")
                else:
                    plan.encoded[name] = encode(name, value)
                continue
            data = encode(name, value)
            digest = hashlib.blake2b(data, digest_size=16).digest()
            plan._next[name] = _Held(digest=digest)
            if held is not None and held.digest == digest:
                plan.reuse.append(name)
            else:
                plan.encoded[name] = data
        return plan

    def commit(self, plan: VariablePlan) -> None:
        """Record what the worker holds now that ``plan`` has been sent."""
        self._held = plan._next

    def clear(self) -> None:
        self._held = {}


def check_names(variables: Mapping[str, Any], tool_names: set[str]) -> None:
    invalid = [
        name
        for name in variables
        if not isinstance(name, str)
        or not name.isidentifier()
        or keyword.iskeyword(name)
        or name in RESERVED_NAMES
        or name in tool_names
    ]
    if invalid:
        raise InvalidInterpreterInput(
            "variable names must be Python identifiers distinct from SUBMIT and the tool names; "
            f"invalid names: {invalid!r}"
        )


def encode(name: str, value: Any) -> bytes:
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInterpreterInput(f"variable {name!r} cannot be sent to the sandbox (not JSON): {exc}") from exc
    return text.encode("utf-8", "surrogatepass")


def _is_immutable(value: Any) -> bool:
    if isinstance(value, _SCALARS):
        return True
    return isinstance(value, tuple) and all(_is_immutable(item) for item in value)


def _same_immutable(held: Any, value: Any) -> bool:
    if held is value:
        return True
    # Equal scalars of the same type are interchangeable (1 == 1.0 == True are not); a tuple is
    # only recognised by identity, since its items could differ in type while comparing equal.
    return type(held) is type(value) and isinstance(value, _SCALARS) and held == value
