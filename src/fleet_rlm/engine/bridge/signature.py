"""Turning a signature string from sandbox code into a ``dspy.Signature`` without resolving any name.

DSPy's own parser resolves a field type by looking names up in the host process: it imports
modules and follows attributes (``x: os.environ -> y``). Here the text is only parsed (``ast``,
never compiled or run) and every type is built from the table in
:mod:`fleet_rlm.engine.bridge.allowlist`; DSPy receives the finished class.
"""

from __future__ import annotations

import ast
import io
import keyword
import tokenize
from typing import Any, Literal, Optional, Union

import dspy
from dspy.signatures import make_signature

from fleet_rlm.engine.bridge import allowlist as allowed
from fleet_rlm.engine.dspy_compat import IS_TYPE_UNDEFINED


class SignatureRefused(ValueError):
    """The signature is not one Fleet builds; the message says what was wrong, for the sandbox code."""


def build_signature(text: Any, instructions: Any, *, kind: str) -> type[dspy.Signature]:
    """The signature ``text`` (``"a: int, b -> c: list[str]"``) with ``instructions``, for a ``kind`` predictor."""
    if not isinstance(text, str):
        raise SignatureRefused(f"the signature must be a string like 'question -> answer', not {_kind_of(text)}")
    if len(text) > allowed.MAX_SIGNATURE_CHARS:
        raise SignatureRefused(f"the signature is longer than {allowed.MAX_SIGNATURE_CHARS} characters")
    if instructions is not None and not isinstance(instructions, str):
        raise SignatureRefused(f"instructions must be a string, not {_kind_of(instructions)}")
    if instructions is not None and len(instructions) > allowed.MAX_INSTRUCTIONS_CHARS:
        raise SignatureRefused(f"instructions are longer than {allowed.MAX_INSTRUCTIONS_CHARS} characters")
    inputs_text, outputs_text = _split(text)
    inputs = _fields(inputs_text, "input")
    outputs = _fields(outputs_text, "output")
    if not outputs:
        raise SignatureRefused("the signature needs at least one output field after '->'")
    names = [name for name, _, _ in inputs + outputs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise SignatureRefused(f"field names must be unique; repeated: {', '.join(duplicates)}")
    if len(names) > allowed.MAX_FIELDS:
        raise SignatureRefused(f"a signature may have at most {allowed.MAX_FIELDS} fields")
    if kind == "ChainOfThought" and allowed.CHAIN_OF_THOUGHT_FIELD in names:
        raise SignatureRefused(
            f"ChainOfThought adds the {allowed.CHAIN_OF_THOUGHT_FIELD!r} output itself; rename that field"
        )
    fields: dict[str, tuple[Any, Any]] = {}
    for name, annotation, typed in inputs:
        fields[name] = (annotation, dspy.InputField() if typed else dspy.InputField(**{IS_TYPE_UNDEFINED: True}))
    for name, annotation, _ in outputs:
        fields[name] = (annotation, dspy.OutputField())
    signature: type[dspy.Signature] = make_signature(fields, instructions)
    return signature


def _split(text: str) -> tuple[str, str]:
    """The inputs and outputs around the one ``->`` (found by tokens, so a literal may contain it)."""
    lines = io.StringIO(text).readlines()  # the lines tokenize reads, so positions map back
    arrows: list[tuple[int, int]] = []
    try:
        for token in tokenize.generate_tokens(iter(lines).__next__):
            if token.type == tokenize.OP and token.string == "->":
                arrows.append(token.start)
    except (tokenize.TokenError, SyntaxError) as exc:
        raise SignatureRefused(f"the signature does not parse: {exc.args[0] if exc.args else exc}") from None
    if len(arrows) != 1:
        raise SignatureRefused(f"the signature must contain exactly one '->' (found {len(arrows)})")
    row, column = arrows[0]
    offset = sum(len(line) for line in lines[: row - 1]) + column
    return text[:offset], text[offset + 2 :]


def _fields(text: str, side: str) -> list[tuple[str, Any, bool]]:
    """``(name, type, typed)`` for each field of one side of the arrow."""
    if not text.strip():
        return []
    source = f"def f({text}): pass"
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise SignatureRefused(f"the {side} fields do not parse: {_quote(text)}") from None
    function = tree.body[0] if len(tree.body) == 1 else None
    if (
        not isinstance(function, ast.FunctionDef)
        or function.decorator_list
        or function.returns is not None
        or len(function.body) != 1
        or not isinstance(function.body[0], ast.Pass)
    ):
        raise SignatureRefused(f"the {side} fields are not a list like 'a: int, b': {_quote(text)}")
    arguments = function.args
    if arguments.posonlyargs or arguments.vararg or arguments.kwonlyargs or arguments.kwarg or arguments.defaults:
        raise SignatureRefused(f"{side} fields are 'name' or 'name: type', without defaults, * or /: {_quote(text)}")
    fields = []
    for argument in arguments.args:
        name = argument.arg
        _check_name(name)
        if argument.annotation is None:
            fields.append((name, str, False))
        else:
            fields.append((name, _TypeBuilder(source, name).build(argument.annotation), True))
    return fields


def _check_name(name: str) -> None:
    if name.startswith("_") or keyword.iskeyword(name) or len(name) > allowed.MAX_FIELD_NAME_CHARS:
        raise SignatureRefused(
            f"field name {_quote(name)} is not allowed: use a name without a leading underscore, "
            f"at most {allowed.MAX_FIELD_NAME_CHARS} characters"
        )
    if name in allowed.PREDICT_KEYWORDS or hasattr(dspy.Signature, name):
        raise SignatureRefused(f"field name {name!r} is reserved by DSPy; choose another name")


class _TypeBuilder:
    """Builds one field's type from its annotation, only from :data:`allowlist.TYPES` and ``GENERICS``."""

    def __init__(self, source: str, field: str) -> None:
        self.source = source
        self.field = field
        self.nodes = 0

    def build(self, node: ast.expr, depth: int = 0, *, none_allowed: bool = False) -> Any:
        self.nodes += 1
        if depth > allowed.MAX_TYPE_DEPTH or self.nodes > allowed.MAX_TYPE_NODES:
            raise self.refused(node, "the type is nested too deeply")
        if isinstance(node, ast.Name) and node.id in allowed.TYPES:
            return allowed.TYPES[node.id]
        if isinstance(node, ast.Constant) and node.value is None and none_allowed:
            return type(None)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in allowed.GENERICS:
            return self._generic(node, node.value.id, depth)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            left = self.build(node.left, depth + 1, none_allowed=True)
            right = self.build(node.right, depth + 1, none_allowed=True)
            return Union[left, right]  # noqa: UP007 - built from objects, not written
        if isinstance(node, ast.Attribute):
            raise self.refused(node, "dotted names are not resolved")
        raise self.refused(node, "it is not one of the allowed types")

    def _generic(self, node: ast.Subscript, name: str, depth: int) -> Any:
        origin, arity = allowed.GENERICS[name]
        elements = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if not elements or (arity is not None and len(elements) != arity):
            expected = f"{arity} type argument(s)" if arity is not None else "at least one argument"
            raise self.refused(node, f"{name}[...] takes {expected}")
        if origin is Literal:
            return Literal.__getitem__(tuple(self._literal(element) for element in elements))
        if origin is tuple and len(elements) == 2 and _is_ellipsis(elements[1]):
            return tuple[self.build(elements[0], depth + 1), ...]  # type: ignore[misc]
        nullable = origin in (Union, Optional)
        arguments = tuple(self.build(element, depth + 1, none_allowed=nullable) for element in elements)
        if origin is Optional:
            return Optional[arguments[0]]  # noqa: UP045 - built from objects, not written
        if origin is Union:
            return Union.__getitem__(arguments)
        return origin[arguments[0] if len(arguments) == 1 else arguments]

    def _literal(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str | int | bool)):
            if isinstance(node.value, str) and len(node.value) > allowed.MAX_LITERAL_CHARS:
                raise self.refused(node, f"a literal value is longer than {allowed.MAX_LITERAL_CHARS} characters")
            return node.value
        if (
            isinstance(node, ast.UnaryOp)
            and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) is int
        ):
            return -node.operand.value
        raise self.refused(node, "Literal[...] takes strings, integers, True, False or None")

    def refused(self, node: ast.AST, reason: str) -> SignatureRefused:
        segment = ast.get_source_segment(self.source, node) or ""
        return SignatureRefused(
            f"field {self.field!r}: type {_quote(segment)} is not allowed ({reason}); "
            f"allowed: {allowed.type_vocabulary()}"
        )


def _is_ellipsis(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is Ellipsis


def _quote(text: str, limit: int = 80) -> str:
    """Sandbox text in a message: quoted and cut short."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _kind_of(value: Any) -> str:
    return type(value).__name__ if value is not None else "None"
