"""Each DSPy internal Fleet relies on is still where ``engine/dspy_compat.py`` takes it from, and still
has the shape Fleet uses; a DSPy upgrade that breaks one fails here, naming it."""

from __future__ import annotations

import ast
import importlib
import inspect
import warnings
from pathlib import Path
from typing import Any, Optional

import dspy
import pytest

import fleet_rlm
from fleet_rlm.engine import dspy_compat

COMPAT = "engine/dspy_compat.py"


def internal(module: str, name: str) -> Any:
    """DSPy's ``module.name``, or a failure saying it moved."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        pytest.fail(f"DSPy moved {module}.{name}; update {COMPAT}", pytrace=False)


def expect(condition: bool, name: str, what: str) -> None:
    if not condition:
        pytest.fail(f"DSPy changed {name}: Fleet relies on {what}; update {COMPAT}", pytrace=False)


def parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_rlm_iteration_hooks_fleet_overrides() -> None:
    assert dspy_compat.AdapterParseError is internal("dspy.utils.exceptions", "AdapterParseError")
    expect(issubclass(dspy_compat.AdapterParseError, Exception), "AdapterParseError", "an exception")
    for name in dspy_compat.RLM_ITERATION_HOOKS:
        expect(hasattr(dspy.RLM, name), f"dspy.RLM.{name}", "the method")
    for name in ("_execute_iteration", "_aexecute_iteration"):
        expect(
            parameters(getattr(dspy.RLM, name))[:5] == ["self", "repl", "variables", "history", "iteration"],
            f"dspy.RLM.{name}",
            "(repl, variables, history, iteration, ...)",
        )
    for name in ("_extract_fallback", "_aextract_fallback"):
        expect(
            parameters(getattr(dspy.RLM, name)) == ["self", "variables", "history", "output_field_names"],
            f"dspy.RLM.{name}",
            "(variables, history, output_field_names)",
        )


def test_usage_tracker() -> None:
    tracker = internal("dspy.utils.usage_tracker", "UsageTracker")
    assert dspy_compat.UsageTracker is tracker
    expect(
        parameters(tracker.add_usage) == ["self", "lm", "usage_entry"], "UsageTracker.add_usage", "(lm, usage_entry)"
    )
    expect(parameters(tracker.__init__) == ["self"], "UsageTracker()", "a constructor without arguments")
    typesafe = inspect.getsource(importlib.import_module("dspy.clients.typesafe"))
    expect("usage_tracker.add_usage(" in typesafe, "UsageTracker", "DSPy reporting usage through add_usage")


def test_sandbox_lm_passes_calls_to_the_model_it_wraps() -> None:
    sandbox_lm = internal("dspy.primitives.facade", "SandboxLM")
    assert dspy_compat.SandboxLM is sandbox_lm
    expect(issubclass(sandbox_lm, dspy.BaseLM), "SandboxLM", "a dspy.BaseLM")
    expect(parameters(sandbox_lm.__init__)[:2] == ["self", "lm"], "SandboxLM", "SandboxLM(lm)")

    class Recorder:
        model, model_type, kwargs = "recorder", "chat", {"temperature": 0.0}

        def __init__(self) -> None:
            self.seen: list[Any] = []

        def __call__(self, **kwargs: Any) -> list[str]:
            self.seen.append(kwargs["messages"])
            return ["ok"]

    wrapped = Recorder()
    messages = [{"role": "user", "content": "hi"}]
    expect(sandbox_lm(wrapped)(messages=messages) == ["ok"], "SandboxLM.__call__", "calling the wrapped model")
    expect(wrapped.seen == [messages] and wrapped.seen[0] is messages, "SandboxLM", "passing messages on as is")
    expect(callable(getattr(sandbox_lm, "acall", None)), "SandboxLM.acall", "an async call")


@pytest.mark.parametrize("name", ["CONSTRUCT_TOOL", "CALL_TOOL"])
def test_facade_tool_names_are_what_the_sandbox_shim_calls(name: str) -> None:
    value = internal("dspy.primitives.facade", name)
    assert getattr(dspy_compat, name) == value
    expect(isinstance(value, str) and value.isidentifier(), name, "a tool name")
    shim = internal("dspy.primitives.facade", "SHIM_SETUP")
    expect(f'_dspy_host("{value}"' in shim or f'"{value}",' in shim, name, "the shim calling the host tool by it")
    install = inspect.getsource(internal("dspy.primitives.facade", "FacadeInvocation").install)
    expect(name in install, name, "FacadeInvocation.install registering the host tool under it")


def test_the_shim_names_are_those_it_binds_in_the_sandbox() -> None:
    """The kernel leaves these out of a session's variables: a name the shim binds that Fleet missed
    would be listed (and lost) as the session's, a name it no longer binds is harmless."""
    shim = internal("dspy.primitives.facade", "SHIM_SETUP")
    token = internal("dspy.primitives.facade", "HOST_TOKEN_VAR")
    names = dspy_compat.sandbox_shim_names()
    expect(token in names and f"{token}" in shim, "HOST_TOKEN_VAR", "the host token the shim reads")
    expect({"dspy", "_DspyModule", "_dspy_host"} <= names, "SHIM_SETUP", "its dspy module and internals")
    namespace: dict[str, object] = {token: "not the host's"}
    exec(shim, namespace)
    bound = {name for name in namespace if not (name.startswith("__") and name.endswith("__"))}  # Python's own
    expect(bound <= names, "SHIM_SETUP", "binding only the names read off its source")


def test_rlm_binds_each_serialized_input_under_its_raw_names() -> None:
    source = inspect.getsource(internal("dspy.predict.rlm", "RLM")._prepare_serializable_vars)
    expect('f"_raw_{name}"' in source, "RLM._prepare_serializable_vars", "binding an input's payload as _raw_{name}")
    expect('f"{raw_var_name}_base64"' in source, "RLM._prepare_serializable_vars", "and binary ones as ..._base64")
    assert dspy_compat.RAW_INPUT_NAMES == ("_raw_{name}", "_raw_{name}_base64")


def test_signature_marker_is_what_the_shim_sends() -> None:
    marker = internal("dspy.primitives.facade", "SIGNATURE_MARKER")
    assert marker == dspy_compat.SIGNATURE_MARKER
    shim = internal("dspy.primitives.facade", "SHIM_SETUP")
    expect(
        f'{{"{marker}": True, "signature": signature, "instructions": instructions}}' in shim,
        "SIGNATURE_MARKER",
        "the shim sending dspy.Signature(...) as {marker: True, 'signature', 'instructions'}",
    )


def test_is_type_undefined_marks_untyped_inputs() -> None:
    marker = internal("dspy.utils.constants", "IS_TYPE_UNDEFINED")
    assert marker == dspy_compat.IS_TYPE_UNDEFINED
    parsed = dspy.Signature("question -> answer").input_fields["question"]
    expect((parsed.json_schema_extra or {}).get(marker) is True, "IS_TYPE_UNDEFINED", "DSPy marking untyped inputs so")
    field = dspy.InputField(**{marker: True})
    expect((field.json_schema_extra or {}).get(marker) is True, "IS_TYPE_UNDEFINED", "dspy.InputField accepting it")


def test_annotation_allows_none() -> None:
    allows_none = internal("dspy.adapters.utils", "annotation_allows_none")
    assert dspy_compat.annotation_allows_none is allows_none
    answers = [allows_none(str | None), allows_none(Optional[int]), allows_none(str), allows_none(list[str])]  # noqa: UP045
    expect(answers == [True, True, False, False], "annotation_allows_none", "True exactly for optional annotations")


def test_adapter_message_call_vouches_for_one_call() -> None:
    vouch = internal("dspy.clients._deprecation", "adapter_message_call")
    origin = internal("dspy.clients._deprecation", "_adapter_call")
    warn = internal("dspy.clients._deprecation", "warn_openai_messages")
    assert dspy_compat.adapter_message_call is vouch
    lm, messages = object(), [{"role": "user", "content": "hi"}]
    expect(origin.get() is None and dspy_compat.adapter_call_origin() is None, "_adapter_call", "None outside")
    with vouch(lm, messages):
        current = dspy_compat.adapter_call_origin()
        expect(
            current is not None and current[0] is lm and current[1] is messages,
            "_adapter_call",
            "the (lm, messages) adapter_message_call sets",
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            warn(lm, messages)  # vouched for: no deprecation warning
    with pytest.warns(DeprecationWarning):
        warn(lm, messages)


def test_strip_code_fences_is_what_rlm_runs() -> None:
    strip = internal("dspy.predict.rlm", "_strip_code_fences")
    assert dspy_compat.strip_code_fences is strip
    expect(strip("```python\nprint(1)\n```") == "print(1)", "_strip_code_fences", "fences removed")
    expect(strip("print(2)") == "print(2)", "_strip_code_fences", "unfenced code kept")
    with pytest.raises(SyntaxError):
        strip("```sql\nselect 1\n```")
    rlm_source = inspect.getsource(dspy.RLM)
    expect("_strip_code_fences(" in rlm_source, "_strip_code_fences", "dspy.RLM running the code it returns")


def _is_public(module: str, name: str) -> bool:
    """Whether ``module.name`` is DSPy's public API: a top-level ``dspy`` name, or in a package's ``__all__``."""
    if name.startswith("_"):
        return False
    if module == "dspy":
        return True
    if any(part.startswith("_") for part in module.split(".")):
        return False
    imported = importlib.import_module(module)
    return hasattr(imported, "__path__") and name in getattr(imported, "__all__", ())


def test_only_the_compat_module_imports_dspy_internals() -> None:
    root = Path(fleet_rlm.__file__).parent
    compat = root / COMPAT
    private: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if path == compat:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dspy":
                private += [
                    f"{path.relative_to(root)}: {node.module}.{alias.name}"
                    for alias in node.names
                    if not _is_public(node.module, alias.name)
                ]
            elif isinstance(node, ast.Import):
                private += [
                    f"{path.relative_to(root)}: import {alias.name}"
                    for alias in node.names
                    if alias.name.startswith("dspy.")
                ]
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                chain = ast.unparse(node)
                if chain.startswith("dspy."):
                    private.append(f"{path.relative_to(root)}: {chain}")
    assert not private, f"DSPy internals outside {COMPAT} (take them from there): {private}"


def test_process_wide_setting_is_what_configure_set_whatever_the_context() -> None:
    expect(dspy_compat.process_wide_setting("trace") is dspy.settings.trace, "main_thread_config", "it holding trace")
    with dspy.context(trace=[]):
        assert dspy_compat.process_wide_setting("trace") is not dspy.settings.trace
    configured = dspy.settings.max_trace_size
    dspy.configure(max_trace_size=configured + 1)
    try:
        expect(
            dspy_compat.process_wide_setting("max_trace_size") == configured + 1,
            "main_thread_config",
            "dspy.configure updating it in place",
        )
    finally:
        dspy.configure(max_trace_size=configured)


def test_repl_history_has_the_entries_fleets_adapters_send_as_a_conversation() -> None:
    assert dspy_compat.REPLHistory is internal("dspy.primitives.repl_types", "REPLHistory")
    assert dspy_compat.REPLEntry is internal("dspy.primitives.repl_types", "REPLEntry")
    history = dspy_compat.REPLHistory(max_output_chars=10).append(reasoning="r", code="c", output="o" * 30)
    (entry,) = history.entries
    expect((entry.reasoning, entry.code, entry.output) == ("r", "c", "o" * 30), "REPLEntry", "its three fields")
    shown = dspy_compat.REPLEntry.format_output(entry.output, history.max_output_chars)
    expect(shown.startswith("Output (30 chars):"), "REPLEntry.format_output", "a header with the true length")


def test_the_json_adapters_format_hook_and_schema_model() -> None:
    hook = getattr(dspy.JSONAdapter, dspy_compat.JSON_ADAPTER_FORMAT_HOOK, None)
    expect(hook is not None, dspy_compat.JSON_ADAPTER_FORMAT_HOOK, "a JSONAdapter method")
    expect(
        parameters(hook) == ["self", "lm", "lm_kwargs", "signature"],
        "JSONAdapter._prepare_response_format",
        "(lm, lm_kwargs, signature)",
    )
    assert dspy_compat.structured_outputs_model is internal(
        "dspy.adapters.json_adapter", "_get_structured_outputs_response_format"
    )
    schema = dspy_compat.structured_outputs_model(dspy.Signature("question -> reasoning, code")).model_json_schema()
    expect(
        schema["required"] == ["reasoning", "code"], "_get_structured_outputs_response_format", "every field required"
    )
    expect(schema["additionalProperties"] is False, "_get_structured_outputs_response_format", "no other fields")
