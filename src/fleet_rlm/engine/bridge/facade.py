"""DSPy's sandbox ``dspy`` facade as Fleet lets sandbox code use it.

``dspy.RLM`` and ``dspy.Flex`` put two tools in every sandbox: ``__dspy_construct__`` builds a
predictor on the host from a kind, a signature and options; ``__dspy_call__`` runs it. Fleet
stands in front of both: a construct call is checked against the allow-list and its signature is
built by Fleet (:mod:`~fleet_rlm.engine.bridge.signature`), so DSPy gets a finished class and
options it knows; a call must name a predictor built here and pass exactly its inputs. Refusals
are Fleet's own messages; a failure of the predictor itself comes back scrubbed.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import dspy

from fleet_rlm.engine.bridge import allowlist as allowed
from fleet_rlm.engine.bridge.scrub import scrub
from fleet_rlm.engine.bridge.signature import SignatureRefused, build_signature
from fleet_rlm.engine.dspy_compat import SIGNATURE_MARKER, annotation_allows_none
from fleet_rlm.sandbox.tool_calls import ToolError

_HANDLE = re.compile(rf"[A-Za-z_][A-Za-z0-9_]{{0,{allowed.MAX_HANDLE_CHARS - 1}}}")


def refused(message: str) -> ToolError:
    return ToolError(f"refused by Fleet: {message}")


def host_failure(exc: Exception, secrets: Sequence[str]) -> ToolError:
    """An exception raised by host code, as the sandbox may see it: its type name and a scrubbed message."""
    return ToolError(f"{type(exc).__name__}: {scrub(str(exc), secrets)}")


class FacadeGuard:
    """Fleet's checks in front of one installed facade (one pair of DSPy's construct and call tools)."""

    def __init__(self, construct: Callable[..., Any], call: Callable[..., Any], secrets: Sequence[str] = ()) -> None:
        self.originals = (construct, call)
        self._secrets = tuple(secrets)
        self._inputs: dict[str, tuple[frozenset[str], frozenset[str]]] = {}  # handle -> (all inputs, required)
        self._lock = threading.Lock()

    def construct(self, kind: Any, signature: Any, attr_name: Any, kwargs: Any = None) -> str:
        if not isinstance(kind, str) or kind not in allowed.PREDICTOR_KINDS:
            raise refused(_kind_refusal(kind))
        if not isinstance(attr_name, str) or not _HANDLE.fullmatch(attr_name):
            raise refused(f"a predictor's name must be an identifier of at most {allowed.MAX_HANDLE_CHARS} characters")
        options = _options(kind, kwargs)
        text, instructions = _signature_payload(signature)
        try:
            built = build_signature(text, instructions, kind=kind)
        except SignatureRefused as exc:
            raise refused(f"dspy.{kind} signature: {exc}") from None
        with self._lock:
            if attr_name not in self._inputs and len(self._inputs) >= allowed.MAX_PREDICTORS:
                raise refused(f"a sandbox may build at most {allowed.MAX_PREDICTORS} predictors")
            try:
                handle = self.originals[0](kind=kind, signature=built, attr_name=attr_name, kwargs=options)
            except Exception as exc:
                raise host_failure(exc, self._secrets) from None
            self._inputs[str(handle)] = _input_names(built)
        return str(handle)

    def call(self, handle: Any, inputs: Any = None) -> Any:
        with self._lock:
            expected = self._inputs.get(handle) if isinstance(handle, str) else None
        if expected is None:
            raise refused(f"no predictor named {_quote(handle)} was built in this sandbox")
        names, required = expected
        if inputs is None:
            inputs = {}
        if not isinstance(inputs, dict):
            raise refused(f"a predictor's inputs are keyword arguments, not {type(inputs).__name__}")
        unknown = sorted(str(name) for name in inputs if name not in names)
        if unknown:
            raise refused(
                f"predictor {handle!r} has no input(s) {', '.join(map(_quote, unknown))}; "
                f"its inputs: {', '.join(sorted(names)) or '(none)'}"
            )
        missing = sorted(required - inputs.keys())
        if missing:
            raise refused(f"predictor {handle!r} needs input(s) {', '.join(missing)}")
        try:
            return self.originals[1](handle=handle, inputs=inputs)
        except Exception as exc:
            raise host_failure(exc, self._secrets) from None


def _kind_refusal(kind: Any) -> str:
    kinds = ", ".join(f"dspy.{name}" for name in allowed.PREDICTOR_KINDS)
    if isinstance(kind, str) and kind in allowed.REFUSED_KINDS:
        return f"dspy.{kind} is not available in Fleet's sandbox ({allowed.REFUSED_KINDS[kind]}); available: {kinds}"
    return f"predictor kind {_quote(kind)} is not available; available: {kinds}"


def _signature_payload(signature: Any) -> tuple[Any, Any]:
    """The signature text and instructions from what the shim sends (a string or ``dspy.Signature(...)``'s marker)."""
    if isinstance(signature, dict):
        if signature.get(SIGNATURE_MARKER) is not True or not set(signature) <= {
            SIGNATURE_MARKER,
            "signature",
            "instructions",
        }:
            raise refused("a signature is a string like 'question -> answer' or dspy.Signature(string, instructions)")
        return signature.get("signature"), signature.get("instructions")
    return signature, None


def _options(kind: str, kwargs: Any) -> dict[str, Any]:
    """The constructor options, each allowed for ``kind`` and within its bounds."""
    if kwargs is None:
        return {}
    allowed_options = allowed.PREDICTOR_KINDS[kind]
    names = ", ".join(allowed_options) or "none"
    if not isinstance(kwargs, dict):
        raise refused(f"dspy.{kind} options must be keyword arguments")
    options: dict[str, Any] = {}
    for name, value in kwargs.items():
        option = allowed_options.get(name)
        if option is None:
            raise refused(f"dspy.{kind} does not take option {_quote(name)} here; options: {names}")
        if not _within(value, option):
            what = "an integer" if option.type is int else "a number"
            raise refused(f"dspy.{kind} option {name} must be {what} from {option.low:g} to {option.high:g}")
        options[name] = value
    return options


def _within(value: Any, option: allowed.NumberOption) -> bool:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (option.type is int and isinstance(value, float))
    ):
        return False
    return bool(option.low <= value <= option.high)


def _input_names(signature: type[dspy.Signature]) -> tuple[frozenset[str], frozenset[str]]:
    fields = signature.input_fields
    optional = {name for name, field in fields.items() if annotation_allows_none(field.annotation)}
    return frozenset(fields), frozenset(fields) - optional


def _quote(value: Any, limit: int = 60) -> str:
    text = repr(value) if isinstance(value, str) else type(value).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
