"""The service's floor plan, read off the source: FleetService wires a few sub-services, the rest of
Fleet uses those and never the parts behind them, and the store takes data, never service callbacks."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import fleet_rlm
from fleet_rlm.service.service import FleetService
from fleet_rlm.store import Store, records
from fleet_rlm.store.shared_blobs import SharedBlobs

SRC = Path(fleet_rlm.__file__).parent
PARTS = {"parts", "store", "pool", "blobs", "registry"}
"""What a sub-service keeps to itself: the store, the sandbox pool, the blob store, the kernel registry."""
MAX_PUBLIC_MEMBERS = 15


def _chain(node: ast.expr) -> list[str]:
    """``service.turns.get`` as ``["service", "turns", "get"]`` (calls and subscripts cut the chain)."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
    return names[::-1]


def _reaches_parts(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
            services = [i for i, name in enumerate(chain) if name.lstrip("_").endswith("service")]
            if services and chain[-1] in PARTS and len(chain) - 1 > services[0]:
                lines.append(node.lineno)
    return sorted(set(lines))


def test_nothing_outside_the_service_reaches_its_store_pool_or_blobs() -> None:
    outside = [p for p in SRC.rglob("*.py") if not p.is_relative_to(SRC / "service")]
    reaching = {
        str(path.relative_to(SRC)): lines
        for path in outside
        if (lines := _reaches_parts(ast.parse(path.read_text(), str(path))))
    }
    assert reaching == {}, f"these reach a service's parts instead of its sub-services: {reaching}"


def test_the_check_finds_a_route_that_reaches_the_store() -> None:
    route = "async def labels(service):\n    return await service.parts.store.list_labels()\n"
    assert _reaches_parts(ast.parse(route)) == [2]
    assert _reaches_parts(ast.parse("await self.service.kernels.pool.acquire()")) == [1]
    assert _reaches_parts(ast.parse("await service.quality.labels()")) == []


def test_fleet_service_is_a_few_sub_services_and_its_lifecycle() -> None:
    tree = ast.parse((SRC / "service" / "service.py").read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == FleetService.__name__]
    assert cls.bases == [], "FleetService composes its sub-services; it inherits from nothing"
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    attributes = {
        target.attr
        for node in ast.walk(init)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
    }
    public = sorted(name for name in methods | attributes if not name.startswith("_"))
    assert len(public) <= MAX_PUBLIC_MEMBERS, public
    assert {"sessions", "files", "turns", "kernels", "archives", "memory", "quality"} <= set(public)


def test_the_store_takes_no_callbacks() -> None:
    """The store's methods and the records they take hold data: nothing the store runs inside a
    transaction is the service's."""
    taking = [
        f"Store.{name}"
        for name in dir(Store)
        if not name.startswith("_") and callable(member := getattr(Store, name))
        for parameter in inspect.signature(member).parameters.values()
        if "Callable" in str(parameter.annotation)
    ]
    taking += [
        f"{record.__name__}.{field.name}"
        for record in vars(records).values()
        if isinstance(record, type) and dataclasses.is_dataclass(record)
        for field in dataclasses.fields(record)
        if "Callable" in str(field.type)
    ]
    taking += [
        f"SharedBlobs.{name}"
        for name, member in vars(SharedBlobs).items()
        if callable(member) and "Callable" in str(inspect.signature(member))
    ]
    assert taking == []
