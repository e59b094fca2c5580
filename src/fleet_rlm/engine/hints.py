"""What Fleet adds to the model's view of a failed execution: causes the host can see and a small model
does not.

Each was seen with a real 1.5B model, which then ran the same code until the loop guard stopped it:

- code cut off at a double quote its JSON reply did not escape (``f'...{review["text"]}'`` arrived as
  ``f'...{review[``): the reply was valid JSON, its ``code`` string just ended there;
- a ``KeyError`` for a column of the other file of a join (``amount`` looked up in the customers);
- a ``NameError`` for a name the code sets only inside ``if match:``, after a search that found nothing;
- a ``NameError`` for ``pd``, never imported in that sandbox.
"""

from __future__ import annotations

import ast
import codeop
import difflib
import re
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from fleet_rlm.engine.honesty import parsed

MAX_COLUMNS_SHOWN = 20
TAIL_CHARS = 60
MAX_NAMES_SHOWN = 12
IMPORTS = {
    "pd": "import pandas as pd",
    "np": "import numpy as np",
    "plt": "import matplotlib.pyplot as plt",
    "Counter": "from collections import Counter",
    "defaultdict": "from collections import defaultdict",
    **{module: f"import {module}" for module in ("re", "json", "os", "math", "csv", "statistics", "datetime")},
}
"""Names small models use without importing them, and the import that defines each."""
_UNDEFINED = re.compile(r"name '(\w+)' is not defined")
_MISSING_PATH = re.compile(r"""No such file or directory: ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
_SEARCHES = frozenset({"search", "match", "fullmatch"})
_WORD = re.compile(r"[A-Za-z]{3,}")


@dataclass
class FailureHints:
    """The hints one RLM loop's failed executions get; :meth:`hint` is the one entry point."""

    json_replies: bool = False
    """The model replies in a JSON object (``lm.structured_output``), so its code is a JSON string."""
    inputs: list[str] = field(default_factory=list)
    """The paths of the input files (under ``files/``)."""
    reading: str = ""
    """The example read of the inputs (:func:`~fleet_rlm.workspace.reading.example_read`)."""
    tables: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The header of each input table (path to its column names): :func:`~fleet_rlm.workspace.reading.input_tables`."""

    def hint(self, code: str, error_type: str, message: str) -> str | None:
        """What the model is told on top of the error of ``code``, or None when Fleet sees nothing more."""
        if error_type == "SyntaxError":
            return cut_off_hint(code) if self.json_replies else None
        if error_type == "KeyError":
            return self._missing_column(message)
        if error_type == "NameError":
            return undefined_name_hint(code, message)
        if error_type == "FileNotFoundError":
            return self._missing_file(message)
        return None

    def _missing_file(self, message: str) -> str | None:
        """A path that does not exist: a manifest line taken for a path, or a near miss of an input's."""
        match = _MISSING_PATH.search(message)
        if match is None or not self.inputs:
            return None
        try:
            missing = ast.literal_eval(match.group(1))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
        if not isinstance(missing, str):
            return None
        within = [path for path in self.inputs if path in missing and path != missing]
        if within:
            path = max(within, key=len)
            told = (
                f"[Fleet] There is no file {_cut(missing)!r}: the file's path is {path!r}. The rest of its line in "
                "`workspace` describes it (size, kind, sha256): `workspace` is a listing to read, not paths to open."
            )
            if repr(path) not in self.reading:
                return told
            return f"{told} Do not loop over its lines; open the file by its path, such as:\n{self.reading}"
        named = {path.rsplit("/", 1)[-1]: path for path in self.inputs}
        near = difflib.get_close_matches(missing, self.inputs, n=1) or [
            named[name] for name in difflib.get_close_matches(missing.rsplit("/", 1)[-1], list(named), n=1)
        ]
        if not near:
            return None
        return f"[Fleet] There is no file {_cut(missing)!r}; the input file nearest to it is {near[0]!r} (paths are relative to the workspace)."

    def _missing_column(self, message: str) -> str | None:
        try:
            key = ast.literal_eval(message.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
        if not isinstance(key, str):
            return None
        holders = [path for path, header in self.tables.items() if key in header]
        if not holders:
            alike = [
                (path, column)
                for path, header in self.tables.items()
                for column in header
                if column.strip().lower() == key.strip().lower()
            ]
            if not alike:
                return None
            path, column = alike[0]
            return f"[Fleet] No input table has a column {key!r}; {path} has {column!r} (names must match exactly)."
        columns = "; ".join(f"{path}: {_columns(header)}" for path, header in self.tables.items())
        told = (
            f"[Fleet] The table this code indexed has no column {key!r}. In the input files, {key!r} is a "
            f"column of {' and '.join(holders)}. The input tables' columns: {columns}."
        )
        shared = _shared_columns(self.tables, holders[0])
        if shared:
            told += (
                f" To use columns of two files, read both by their paths and merge them on a column they share "
                f"({', '.join(shared)})."
            )
        return told


def _cut(text: str) -> str:
    return text if len(text) <= TAIL_CHARS * 2 else text[: TAIL_CHARS * 2] + "..."


def _columns(header: tuple[str, ...]) -> str:
    shown = ", ".join(header[:MAX_COLUMNS_SHOWN])
    return shown + (", ..." if len(header) > MAX_COLUMNS_SHOWN else "")


def _shared_columns(tables: dict[str, tuple[str, ...]], path: str) -> list[str]:
    others = {column for other, header in tables.items() if other != path for column in header}
    return [column for column in tables[path] if column in others]


def ends_mid_statement(code: str) -> bool:
    """Whether ``code`` stops inside a statement: more input would be needed (``codeop``), or its last line
    holds a string literal that is never closed."""
    lines = code.rstrip().split("\n")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return codeop.compile_command("\n".join(lines), "<reply>", "exec") is None
    except SyntaxError as error:
        return (error.msg or "").startswith("unterminated string literal") and error.lineno == len(lines)
    except (ValueError, OverflowError, MemoryError, RecursionError):
        return False


def cut_off_hint(code: str) -> str | None:
    """The hint for code of a JSON reply that stops inside a statement: an unescaped ``"`` ended it."""
    if not code.strip() or not ends_mid_statement(code):
        return None
    tail = code.rstrip().rsplit("\n", 1)[-1].strip()[-TAIL_CHARS:]
    return (
        f"[Fleet] Your code stops in the middle of a statement, at `{tail}`: your reply is JSON, and a double "
        'quote (") in `code` that is not escaped ends the string there, so the rest of the code was lost. '
        "Write the strings in your code with single quotes ('text'), or escape each double quote as \\\"."
    )


def undefined_name_hint(code: str, message: str) -> str | None:
    """The hint for a ``NameError``: the import a known alias needs, or the statement that would have set
    the name and did not run."""
    match = _UNDEFINED.search(message)
    tree = parsed(code)
    if match is None or tree is None:
        return None
    name = match.group(1)
    scopes = list(_binding_scopes(tree.body, name, ()))
    if not scopes:
        if name in IMPORTS:
            return f"[Fleet] `{name}` was never imported in this sandbox: start the code with `{IMPORTS[name]}`."
        names = _names_set(tree)
        if not names:
            return None
        shown = ", ".join(f"`{each}`" for each in names[:MAX_NAMES_SHOWN]) + (
            ", ..." if len(names) > MAX_NAMES_SHOWN else ""
        )
        return (
            f"[Fleet] Nothing has set `{name}`: not this code, nor an earlier execution. The names this code "
            f"sets: {shown}."
        )
    if any(not scope for scope in scopes):
        return None  # set at the top level: the code used it before that line
    headers = scopes[0]
    where = " → ".join(f"`{_header(node)}`" for node in headers)
    innermost = headers[-1]
    if isinstance(innermost, ast.FunctionDef | ast.AsyncFunctionDef):
        return f"[Fleet] `{name}` is set only inside the function {where}: it is local to it. Return it instead."
    told = f"[Fleet] `{name}` is set only under {where} in this code"
    if isinstance(innermost, ast.Try | ast.TryStar):
        return f"{told}, where an error was raised and caught before it was set: print the error instead of passing over it."
    if not isinstance(innermost, ast.If):
        return f"{told}, and that line never ran."
    in_loop = any(isinstance(node, ast.For | ast.AsyncFor | ast.While) for node in headers[:-1])
    wanted = _sets(innermost.body, name)  # else the name is set under the `else:`
    was = ("never true" if in_loop else "false") if wanted else ("never false" if in_loop else "true")
    told += f", and that line never ran: `{ast.unparse(innermost.test)}` was {was}"
    search = _search_behind(tree, innermost.test) if wanted else None
    if search is None:
        return told + "."
    pattern, text = search
    told += f", so the search found no match for {pattern!r}: the text says it differently."
    word = max(_WORD.findall(pattern), key=len, default="")
    if not word:
        return told
    return (
        f"{told} Look at the lines that hold a key word first, such as:\n"
        f"print([line for line in {text}.splitlines() if {word.lower()!r} in line.lower()][:5])"
    )


def _binding_scopes(body: Sequence[ast.stmt], name: str, outer: tuple[ast.stmt, ...]) -> Iterator[tuple[ast.stmt, ...]]:
    """For each statement of ``body`` (recursively) that sets ``name``, the compound statements around it."""
    for statement in body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if statement.name == name:
                yield outer
            elif not isinstance(statement, ast.ClassDef) and _sets(statement.body, name):
                yield (*outer, statement)
            continue
        nested: list[list[ast.stmt]]
        if isinstance(statement, ast.Try | ast.TryStar):
            nested = [statement.body, statement.orelse, statement.finalbody, *(h.body for h in statement.handlers)]
        elif isinstance(statement, ast.Match):
            nested = [case.body for case in statement.cases]
        else:
            nested = [getattr(statement, "body", []), getattr(statement, "orelse", [])]
        if _binds_here(statement, name):
            yield outer
        for block in nested:
            yield from _binding_scopes(block, name, (*outer, statement))


def _binds_here(statement: ast.stmt, name: str) -> bool:
    """Whether ``statement`` itself (not a block inside it) sets ``name``."""
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return any((alias.asname or alias.name.split(".")[0]) == name for alias in statement.names)
    heads: list[ast.AST] = []
    if isinstance(statement, ast.Assign):
        heads = [*statement.targets, statement.value]
    elif isinstance(statement, ast.AugAssign | ast.AnnAssign | ast.For | ast.AsyncFor):
        heads = [statement.target]
    elif isinstance(statement, ast.With | ast.AsyncWith):
        heads = [item.optional_vars for item in statement.items if item.optional_vars is not None]
    elif isinstance(statement, ast.If | ast.While):
        heads = [statement.test]
    elif isinstance(statement, ast.Expr | ast.Return) and statement.value is not None:
        heads = [statement.value]
    return any(
        isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store)
        for head in heads
        for node in ast.walk(head)
    )


def _names_set(tree: ast.Module) -> list[str]:
    """The names the code sets (assigned, defined, imported), in the order it writes them."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.append((node.lineno, node.col_offset, node.id))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.append((node.lineno, node.col_offset, node.name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            found.extend((node.lineno, node.col_offset, a.asname or a.name.split(".")[0]) for a in node.names)
    return list(dict.fromkeys(name for *_, name in sorted(found)))


def _sets(body: Sequence[ast.stmt], name: str) -> bool:
    return any(True for _ in _binding_scopes(body, name, ()))


def _header(node: ast.stmt) -> str:
    """The first line of a compound statement as written (``if match:``, ``for x in y:``, ``def f(...):``)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return f"def {node.name}(...)"
    if isinstance(node, ast.If | ast.While):
        return f"{'if' if isinstance(node, ast.If) else 'while'} {ast.unparse(node.test)}:"
    if isinstance(node, ast.For | ast.AsyncFor):
        return f"for {ast.unparse(node.target)} in {ast.unparse(node.iter)}:"
    return ast.unparse(node).split("\n", 1)[0]


def _search_behind(tree: ast.Module, test: ast.expr) -> tuple[str, str] | None:
    """The pattern and the text (as written) of the ``re.search``/``re.match`` call whose result the name
    ``test`` was set to at the top level of the code, or None."""
    if not isinstance(test, ast.Name):
        return None
    for statement in tree.body:
        if not (
            isinstance(statement, ast.Assign)
            and any(isinstance(target, ast.Name) and target.id == test.id for target in statement.targets)
        ):
            continue
        call = statement.value
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in _SEARCHES
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "re"
            and len(call.args) >= 2
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
        ):
            return call.args[0].value, ast.unparse(call.args[1])
    return None
