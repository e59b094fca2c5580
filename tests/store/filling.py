"""Rows for every table of a database at any schema revision, found by reading the schema itself.

The upgrade tests build a database at each past revision, fill it with :func:`fill`, upgrade it and
compare :func:`snapshot` before and after. Nothing here names a revision: a new migration's tables and
columns are filled as soon as it exists. Values are what the application writes (a turn status, an
event type, a file origin) where it constrains them, and otherwise probe the column's limits: NULL
where allowed, the longest text a column holds, unicode, large integers, nested JSON.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    String,
    Table,
    select,
)
from sqlalchemy.engine import Connection

from fleet_rlm.protocol.events import EventType
from fleet_rlm.protocol.status import FINAL_STATUSES
from fleet_rlm.store.tables import FILE_ORIGINS, MEMORY_STATUSES

ROWS_PER_TABLE = 3
NULL_ROW, LONGEST_ROW = 0, 1  # row 0 leaves every nullable column NULL; row 1 fills every column to its limit
LONG_TEXT = 20_000  # characters in an unbounded text column of the longest row
SKIPPED_TABLES = {"alembic_version"}

# Columns whose values the application reads back as a closed set or a given JSON shape.
APPLICATION_VALUES: dict[tuple[str, str], Callable[[int], Any]] = {
    ("turns", "status"): lambda i: FINAL_STATUSES[i % len(FINAL_STATUSES)].value,  # one active turn per session at most
    ("turns", "answer_source"): lambda i: ("submitted", "extracted", "direct", "module")[i % 4],
    ("turns", "context_paths"): lambda i: [f"files/données-{i}.csv", "files/b.txt"],
    ("turns", "artifacts"): lambda i: [{"path": f"artifacts/chart-{i}.png", "size": 1234 + i, "sha256": "ab" * 32}],
    ("events", "type"): lambda i: list(EventType)[i % len(EventType)].value,
    ("files", "origin"): lambda i: FILE_ORIGINS[i % len(FILE_ORIGINS)],
    ("memories", "status"): lambda i: MEMORY_STATUSES[i % len(MEMORY_STATUSES)],
}

Snapshot = dict[str, dict[tuple[Any, ...], dict[str, Any]]]


def reflect(connection: Connection) -> MetaData:
    metadata = MetaData()
    metadata.reflect(connection)
    return metadata


def _text(column: Column[Any], index: int) -> str:
    base = f"#{index} {column.table.name}.{column.name} «ünïcödé» 'quoted' \"double\"\nline two ✓"
    limit = getattr(column.type, "length", None)
    if index == LONGEST_ROW:
        wanted = limit or LONG_TEXT
        return (base * (wanted // len(base) + 1))[:wanted]
    return base[:limit] if limit else base


def _json(column: Column[Any], index: int) -> Any:
    return {
        "row": index,
        "text": f"{column.name} ✓ «{index}»",
        "nested": {"list": [1, 2.5, None, True, "x"], "empty": {}, "big": 2**53 - index},
    }


def value_for(column: Column[Any], index: int, parents: dict[str, list[dict[str, Any]]]) -> Any:
    """The value row ``index`` gets in ``column``."""
    table = column.table.name
    if column.foreign_keys:
        (key,) = column.foreign_keys
        rows = parents[key.column.table.name]
        return rows[index % len(rows)][key.column.name]
    if index == NULL_ROW and column.nullable and not column.primary_key:
        return None
    if (table, column.name) in APPLICATION_VALUES:
        return APPLICATION_VALUES[table, column.name](index)
    kind = column.type
    if isinstance(kind, JSON):
        return _json(column, index)
    if isinstance(kind, DateTime):
        return dt.datetime(2025, 12, 2, 9, 30, 15, 123456, tzinfo=dt.UTC) + dt.timedelta(days=index, seconds=index)
    if isinstance(kind, Boolean):
        return index % 2 == 1
    if isinstance(kind, BigInteger):
        return 2**40 + index if index == LONGEST_ROW else index
    if isinstance(kind, Integer):
        return 2**31 - 1 if index == LONGEST_ROW else index
    if isinstance(kind, Float | Numeric):
        return 1_765_000_000.125 + index
    if isinstance(kind, String):
        return _text(column, index)
    if isinstance(kind, LargeBinary):
        return bytes(range(256)) * (64 if index == LONGEST_ROW else 1) + index.to_bytes(4, "big")
    raise AssertionError(
        f"{table}.{column.name} has type {kind!r}, which the upgrade test cannot fill yet: add it to value_for()"
    )


def fill(connection: Connection) -> dict[str, int]:
    """Insert ``ROWS_PER_TABLE`` rows into every table (parents first); returns the rows per table."""
    metadata = reflect(connection)
    inserted: dict[str, list[dict[str, Any]]] = {}
    for table in metadata.sorted_tables:
        if table.name in SKIPPED_TABLES:
            continue
        rows = [{c.name: value_for(c, i, inserted) for c in table.columns} for i in range(ROWS_PER_TABLE)]
        connection.execute(table.insert(), rows)
        inserted[table.name] = rows
    return {name: len(rows) for name, rows in inserted.items()}


def _key(table: Table, row: dict[str, Any]) -> tuple[Any, ...]:
    columns = list(table.primary_key.columns) or list(table.columns)
    return tuple(row[column.name] for column in columns)


def snapshot(connection: Connection) -> Snapshot:
    """Every row of every table, by primary key, as the database returns it."""
    metadata = reflect(connection)
    found: Snapshot = {}
    for table in metadata.sorted_tables:
        if table.name in SKIPPED_TABLES:
            continue
        rows = [dict(row._mapping) for row in connection.execute(select(table))]
        found[table.name] = {_key(table, row): row for row in rows}
    return found


def losses(before: Snapshot, after: Snapshot) -> list[str]:
    """What ``after`` lacks of ``before``: tables, rows, columns, or values that changed."""
    problems: list[str] = []
    for table, rows in before.items():
        if table not in after:
            problems.append(f"table {table} is gone with its {len(rows)} rows")
            continue
        for key, row in rows.items():
            upgraded = after[table].get(key)
            if upgraded is None:
                problems.append(f"{table} row {key} is gone")
                continue
            for column, value in row.items():
                if column not in upgraded:
                    problems.append(f"{table}.{column} is gone (row {key} had {value!r:.80})")
                elif upgraded[column] != value:
                    problems.append(f"{table}.{column} of row {key}: {value!r:.80} became {upgraded[column]!r:.80}")
    return problems
