"""Consumers of events match on the typed payload: none reads an event's data by key."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "fleet_rlm"
CONSUMERS = [*sorted((SRC / "clients").rglob("*.py")), *sorted((SRC / "service").glob("tracing*.py"))]


def data_reads(path: Path) -> list[str]:
    """Where ``path`` reads ``<something>.data`` or a name ``data`` by key (``[...]`` or ``.get``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        target = node.value if isinstance(node, ast.Subscript) else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target = node.func.value
        is_data = isinstance(target, ast.Name) and target.id == "data"
        is_data = is_data or (isinstance(target, ast.Attribute) and target.attr == "data")
        if is_data:
            found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    return found


def test_no_consumer_reads_event_data_by_key() -> None:
    assert CONSUMERS, "the consumers moved: update the paths"
    reads = [read for path in CONSUMERS for read in data_reads(path)]
    assert not reads, f"read event.payload (typed) instead of data by key at {reads}"
