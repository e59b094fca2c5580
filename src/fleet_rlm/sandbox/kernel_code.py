"""What the host asks of a session kernel between turns: list its variables, snapshot them, restore them.

A kernel is a sandbox whose worker stays alive across a session's turns (docs/kernels.md). The host
never unpickles: snapshotting and restoring run *inside* the sandbox, as code the host sends through
the ordinary ``execute``. The snapshot is a file the sandbox writes in its own workspace
(:data:`SNAPSHOT_REL`), which the host copies out and back as opaque bytes. Everything the sandbox
replies is hostile: :func:`parse_report` keeps only well-formed, bounded fields.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from fleet_rlm.sandbox.base import Sandbox

SNAPSHOT_REL = ".kernel/snapshot.pickle"
MAX_VARIABLES = 200
MAX_NAME_CHARS = 100
MAX_TYPE_CHARS = 80
MAX_PREVIEW_CHARS = 120
MAX_REASON_CHARS = 200
PREVIEW_BELOW_BYTES = 4096

# Runs in the kernel's namespace, in a scope of its own (it leaves no names behind). ARGS is JSON.
_REPORT = r"""
import os as _os, sys as _sys, types as _types, pickle as _pickle

def _size(value):
    try:
        nbytes = getattr(value, "nbytes", None)
        if isinstance(nbytes, int):
            return nbytes
        usage = getattr(value, "memory_usage", None)
        if callable(usage) and type(value).__name__ in ("DataFrame", "Series"):
            total = usage(deep=True)
            return int(total.sum()) if hasattr(total, "sum") else int(total)
        size = _sys.getsizeof(value)
        if isinstance(value, (list, tuple, set, frozenset)):
            size += sum(_sys.getsizeof(item) for item in list(value)[:10000])
        elif isinstance(value, dict):
            size += sum(_sys.getsizeof(k) + _sys.getsizeof(v) for k, v in list(value.items())[:10000])
        return int(size)
    except Exception:
        return 0

def _preview(value, size):
    if size > PREVIEW_BELOW or isinstance(value, (_types.FunctionType, type)):
        return None
    try:
        text = repr(value)
    except Exception:
        return None
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 3] + "..."

def _describe(value):
    shape = getattr(value, "shape", None)
    name = type(value).__name__
    if isinstance(shape, tuple):
        return f"{name} {shape}"
    return name

exclude = set(ARGS["exclude"])
variables, modules = [], {}
for name, value in list(NS.items()):
    if (name.startswith("__") and name.endswith("__")) or name in exclude:
        continue
    if isinstance(value, _types.ModuleType):
        if not value.__name__.startswith("dspy"):
            modules[name] = value.__name__
        continue
    size = _size(value)
    variables.append({"name": name, "type": _describe(value), "size": size, "preview": _preview(value, size)})

saved, lost = [], []
path = ARGS.get("snapshot")
if path is not None:
    room = ARGS["budget"]
    blobs = {}
    for item in sorted(variables, key=lambda item: item["size"]):
        name, value = item["name"], NS[item["name"]]
        if isinstance(value, _types.FunctionType) and value.__module__ == "__main__":
            lost.append({"name": name, "reason": "a function defined in the session cannot be snapshotted"})
            continue
        if item["size"] > room:
            lost.append({"name": name, "reason": "over the snapshot budget"})
            continue
        try:
            data = _pickle.dumps(value, protocol=5)
        except Exception as exc:
            lost.append({"name": name, "reason": f"not picklable ({type(exc).__name__})"})
            continue
        if len(data) > room:
            lost.append({"name": name, "reason": "over the snapshot budget"})
            continue
        room -= len(data)
        blobs[name] = data
        saved.append(name)
    _os.makedirs(_os.path.dirname(path), exist_ok=True)
    temp = path + ".tmp"
    with open(temp, "wb") as handle:
        _pickle.dump({"variables": blobs, "modules": modules}, handle, protocol=5)
    _os.replace(temp, path)
    del blobs
RESULT = {"variables": variables, "modules": modules, "saved": saved, "lost": lost}
"""

_RESTORE = r"""
import os as _os, pickle as _pickle, importlib as _importlib

restored, lost = [], []
path = ARGS["snapshot"]
try:
    with open(path, "rb") as handle:
        data = _pickle.load(handle)
finally:
    try:
        _os.remove(path)
    except OSError:
        pass
for alias, module in dict(data.get("modules", {})).items():
    try:
        NS[alias] = _importlib.import_module(module)
    except Exception as exc:
        lost.append({"name": alias, "reason": f"import {module} failed ({type(exc).__name__})"})
for name, blob in dict(data.get("variables", {})).items():
    try:
        NS[name] = _pickle.loads(blob)
        restored.append(name)
    except Exception as exc:
        lost.append({"name": name, "reason": f"could not be loaded ({type(exc).__name__})"})
RESULT = {"restored": restored, "lost": lost}
"""


def _program(source: str, args: dict[str, Any]) -> str:
    """An expression statement that runs ``source`` in a private scope over the kernel's namespace and
    evaluates to its ``RESULT``."""
    constants = {"PREVIEW_BELOW": PREVIEW_BELOW_BYTES, "PREVIEW_CHARS": MAX_PREVIEW_CHARS}
    scope = f"{{'NS': globals(), 'ARGS': __import__('json').loads({json.dumps(json.dumps(args))}), **{constants!r}}}"
    return f"(lambda scope: (exec({source!r}, scope), scope.get('RESULT'))[1])({scope})"


@dataclass(frozen=True)
class KernelVariableInfo:
    name: str
    type: str
    size: int
    preview: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "size": self.size, "preview": self.preview}


@dataclass(frozen=True)
class Lost:
    name: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "reason": self.reason}


@dataclass
class KernelReport:
    """What a kernel said of its state (parsed, bounded); ``restored`` only after a restore."""

    variables: list[KernelVariableInfo] = field(default_factory=list)
    modules: dict[str, str] = field(default_factory=dict)
    saved: list[str] = field(default_factory=list)
    lost: list[Lost] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)


def run_in_kernel(sandbox: Sandbox, source: str, args: dict[str, Any]) -> Any:
    """Run one of the programs above in ``sandbox`` and return what its ``RESULT`` was (untrusted).
    No tools are bound while it runs; the sandbox's output goes to its observer."""
    saved_tools, saved_fields = dict(sandbox.tools), sandbox.output_fields
    returns = getattr(sandbox, "return_trailing_value", None)
    sandbox.tools = {}
    sandbox.output_fields = None
    if returns is not None:
        sandbox.return_trailing_value = True  # type: ignore[attr-defined]
    try:
        return sandbox.execute(_program(source, args))
    finally:
        sandbox.tools, sandbox.output_fields = saved_tools, saved_fields
        if returns is not None:
            sandbox.return_trailing_value = returns  # type: ignore[attr-defined]


def report(sandbox: Sandbox, exclude: set[str], *, snapshot_budget: int | None) -> KernelReport:
    """List the kernel's user variables; with a budget, also snapshot those that pickle within it to
    :data:`SNAPSHOT_REL` in its workspace."""
    args: dict[str, Any] = {"exclude": sorted(exclude)}
    if snapshot_budget is not None:
        args.update(snapshot=SNAPSHOT_REL, budget=snapshot_budget)
    return parse_report(run_in_kernel(sandbox, _REPORT, args))


def restore(sandbox: Sandbox) -> KernelReport:
    """Load the snapshot the host put at :data:`SNAPSHOT_REL` into the kernel (unpickled in there)."""
    return parse_report(run_in_kernel(sandbox, _RESTORE, {"snapshot": SNAPSHOT_REL}))


def parse_report(raw: Any) -> KernelReport:
    """The well-formed part of what the sandbox sent; anything else is dropped."""
    found = KernelReport()
    if not isinstance(raw, dict):
        return found
    for item in _items(raw.get("variables")):
        name = item.get("name")
        if not isinstance(name, str) or not _name(name):
            continue
        size = item.get("size")
        preview = item.get("preview")
        found.variables.append(
            KernelVariableInfo(
                name=name,
                type=_text(item.get("type"), MAX_TYPE_CHARS) or "object",
                size=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else 0,
                preview=_text(preview, MAX_PREVIEW_CHARS) if isinstance(preview, str) else None,
            )
        )
    modules = raw.get("modules")
    if isinstance(modules, dict):
        for alias, module in list(modules.items())[:MAX_VARIABLES]:
            if _name(alias) and isinstance(module, str) and all(_name(part) for part in module.split(".")):
                found.modules[alias] = module
    found.saved = [name for name in _names(raw.get("saved"))]
    found.restored = [name for name in _names(raw.get("restored"))]
    for item in _items(raw.get("lost")):
        if _name(item.get("name")):
            found.lost.append(Lost(item["name"], _text(item.get("reason"), MAX_REASON_CHARS) or "lost"))
    return found


def _items(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [item for item in value[:MAX_VARIABLES] if isinstance(item, dict)]


def _names(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [name for name in value[:MAX_VARIABLES] if _name(name)]


def _name(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAME_CHARS and value.isidentifier()


def _text(value: Any, limit: int) -> str | None:
    if not isinstance(value, str):
        return None
    printable = "".join(ch if ch.isprintable() else "?" for ch in value[: limit * 2])
    return printable if len(printable) <= limit else printable[: limit - 3] + "..."
