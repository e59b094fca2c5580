"""Every name Fleet takes from DSPy's internals, in one place (checked against DSPy 3.4.1).

DSPy does not export these, so an upgrade may move, rename or reshape any of them without notice.
The rest of Fleet imports them only from here; ``tests/engine/test_dspy_compat.py`` checks each one
(its place and the shape Fleet relies on) and names it when an upgrade breaks it. Public DSPy names
(``dspy.X``, or listed in a DSPy package's ``__all__``) are imported from their public place instead.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

try:
    from dspy.adapters.json_adapter import _get_structured_outputs_response_format
    from dspy.adapters.utils import annotation_allows_none as _annotation_allows_none
    from dspy.clients._deprecation import _adapter_call
    from dspy.clients._deprecation import adapter_message_call as _adapter_message_call
    from dspy.dsp.utils.settings import main_thread_config as _main_thread_config
    from dspy.predict.rlm import _strip_code_fences
    from dspy.primitives.facade import CALL_TOOL as _CALL_TOOL
    from dspy.primitives.facade import CONSTRUCT_TOOL as _CONSTRUCT_TOOL
    from dspy.primitives.facade import HOST_TOKEN_VAR as _HOST_TOKEN_VAR
    from dspy.primitives.facade import SHIM_SETUP as _SHIM_SETUP
    from dspy.primitives.facade import SIGNATURE_MARKER as _SIGNATURE_MARKER
    from dspy.primitives.facade import SandboxLM as _SandboxLM
    from dspy.primitives.repl_types import REPLEntry as _REPLEntry
    from dspy.primitives.repl_types import REPLHistory as _REPLHistory
    from dspy.utils.constants import IS_TYPE_UNDEFINED as _IS_TYPE_UNDEFINED
    from dspy.utils.exceptions import AdapterParseError as _AdapterParseError
    from dspy.utils.usage_tracker import UsageTracker as _UsageTracker
except ImportError as exc:  # pragma: no cover - only on a DSPy upgrade
    raise ImportError(
        f"DSPy moved a name Fleet takes from its internals ({exc}); update engine/dspy_compat.py"
    ) from exc

__all__ = [
    "CALL_TOOL",
    "CONSTRUCT_TOOL",
    "IS_TYPE_UNDEFINED",
    "JSON_ADAPTER_FORMAT_HOOK",
    "RAW_INPUT_NAMES",
    "RLM_ITERATION_HOOKS",
    "SIGNATURE_MARKER",
    "AdapterParseError",
    "REPLEntry",
    "REPLHistory",
    "SandboxLM",
    "UsageTracker",
    "adapter_call_origin",
    "adapter_message_call",
    "annotation_allows_none",
    "process_wide_setting",
    "sandbox_shim_names",
    "strip_code_fences",
    "structured_outputs_model",
]

AdapterParseError = _AdapterParseError
"""``dspy.utils.exceptions.AdapterParseError``: what an adapter raises for a reply it cannot read (its
``signature``, ``lm_response`` and ``parsed_result``); Fleet's RLM turns it into an observation."""

RLM_ITERATION_HOOKS = ("_execute_iteration", "_aexecute_iteration", "_extract_fallback", "_aextract_fallback")
"""``dspy.RLM``'s methods ``FleetRLM`` overrides or calls: ``_execute_iteration(repl, variables, history,
iteration, ...)`` (and its async twin) returning a Prediction or the next history, and
``_extract_fallback(variables, history, output_field_names)`` (and its async twin)."""

JSON_ADAPTER_FORMAT_HOOK = "_prepare_response_format"
"""``dspy.JSONAdapter._prepare_response_format(lm, lm_kwargs, signature)``: where DSPy's JSON adapter puts
``response_format`` in a call's ``lm_kwargs`` before the call; ``engine.adapters.SchemaAdapter``
overrides it to send the schema in the style the endpoint honours."""

structured_outputs_model = _get_structured_outputs_response_format
"""``dspy.adapters.json_adapter._get_structured_outputs_response_format(signature) -> type[BaseModel]``: a
pydantic model of the signature's output fields whose ``model_json_schema()`` is the strict JSON schema
(every property required, no others) DSPy's JSON adapter would send."""

REPLHistory = _REPLHistory
"""``dspy.primitives.repl_types.REPLHistory``: the ``repl_history`` input of ``dspy.RLM``'s action and
extract steps (``entries``, ``max_output_chars``; ``append(reasoning=, code=, output=)`` returns a new one);
Fleet's adapters send its entries as a conversation."""

REPLEntry = _REPLEntry
"""``dspy.primitives.repl_types.REPLEntry``: one iteration in a ``REPLHistory`` (``reasoning``, ``code``,
``output``; ``REPLEntry.format_output(output, max_output_chars)`` is how DSPy shows an output)."""

UsageTracker = _UsageTracker
"""``dspy.utils.usage_tracker.UsageTracker``: the base of ``engine.usage.TurnUsage``. DSPy hands every
model call's usage to ``settings.usage_tracker.add_usage(lm, usage_entry)``; Fleet overrides that method
to count a turn's tokens per model from every thread."""

SandboxLM = _SandboxLM
"""``dspy.primitives.facade.SandboxLM``: the model as DSPy's sandbox facade lets bridged predictors call
it; the base of ``engine.modes.flex_bridge.BridgedLM`` (built as ``SandboxLM(lm)``, calls through
``__call__`` and ``acall``)."""

CONSTRUCT_TOOL = _CONSTRUCT_TOOL
"""``dspy.primitives.facade.CONSTRUCT_TOOL``: the host tool name DSPy's sandbox shim calls to build a
bridged predictor; Fleet's bridge guard and allowlist replace and check that tool."""

CALL_TOOL = _CALL_TOOL
"""``dspy.primitives.facade.CALL_TOOL``: the host tool name DSPy's sandbox shim calls to run a bridged
predictor; Fleet's bridge guard and allowlist replace and check that tool."""

SIGNATURE_MARKER = _SIGNATURE_MARKER
"""``dspy.primitives.facade.SIGNATURE_MARKER``: the key marking a ``dspy.Signature(...)`` the shim sends
as a dict; Fleet's bridge reads the signature text and instructions from such a dict."""

RAW_INPUT_NAMES = ("_raw_{name}", "_raw_{name}_base64")
"""The names ``dspy.RLM._prepare_serializable_vars`` binds an input's serialized payload under, beside the
input's own name (``{name}``: the input field's)."""


def sandbox_shim_names() -> frozenset[str]:
    """The names DSPy's sandbox shim (``dspy.primitives.facade.SHIM_SETUP``) binds in the namespace of
    every interpreter it is installed in, read off its source (its ``dspy``, its ``_dspy*`` and
    ``_Dspy*`` internals, the loop variables it leaves behind), and the host token DSPy injects
    (``HOST_TOKEN_VAR``): none of them is a variable of the session."""
    names = {_HOST_TOKEN_VAR}
    for statement in ast.parse(_SHIM_SETUP).body:
        for node in _outside_definitions(statement):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[0])
    return frozenset(names)


def _outside_definitions(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and what it holds, but not the bodies of the functions and classes it defines."""
    yield node
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return
    for child in ast.iter_child_nodes(node):
        yield from _outside_definitions(child)


IS_TYPE_UNDEFINED = _IS_TYPE_UNDEFINED
"""``dspy.utils.constants.IS_TYPE_UNDEFINED``: the field option marking an input written without a type,
as DSPy's own signature parser marks it; Fleet's bridge builds signatures field by field and sets it too."""

annotation_allows_none = _annotation_allows_none
"""``dspy.adapters.utils.annotation_allows_none(annotation) -> bool``: whether an input field admits None
(is optional); Fleet's bridge uses it to tell required inputs of a bridged predictor from optional ones."""

adapter_message_call = _adapter_message_call
"""``dspy.clients._adapter_message_call(lm, messages)``: the context manager with which DSPy's
adapter vouches for its own ``messages=`` call to ``lm`` (no deprecation warning). Fleet's model wrappers
pass that vouching on to the model they wrap."""

strip_code_fences = _strip_code_fences
"""``dspy.predict.rlm._strip_code_fences(code) -> str``: the code ``dspy.RLM`` will run from what the model
wrote (markdown fences removed; SyntaxError for a non-Python fence); the ``code`` event shows the same."""


def adapter_call_origin() -> tuple[Any, Any] | None:
    """The ``(lm, messages)`` DSPy's adapter is vouching for right now, or None.

    Reads ``dspy.clients._adapter_call``, the context variable ``adapter_message_call`` sets.
    """
    origin = _adapter_call.get()
    if origin is None:
        return None
    lm, messages = origin
    return lm, messages


def process_wide_setting(name: str) -> Any:
    """The value ``dspy.configure`` gave setting ``name`` (DSPy's default if it never did), whatever
    ``dspy.context`` overrides are in effect.

    Reads ``dspy.dsp.utils.settings.main_thread_config``, the dict ``dspy.configure`` updates in place.
    """
    return _main_thread_config.get(name)
