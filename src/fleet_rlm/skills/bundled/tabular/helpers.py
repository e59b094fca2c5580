"""Helpers of the ``tabular`` skill: read, profile and aggregate tables, with pandas or without.

Runs in the sandbox. Uses pandas, pyarrow and openpyxl when they can be imported; otherwise the
standard library reads CSV, TSV, JSON, JSON lines and .xlsx (Parquet needs pyarrow).
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import math
import os
import re
import statistics
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from xml.etree import ElementTree

try:
    import pandas as pd

    HAS_PANDAS = True
except ImportError:
    pd = None
    HAS_PANDAS = False

Row = dict[str, Any]
MISSING = frozenset({"", "na", "n/a", "nan", "null", "none", "-", "--"})
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
EXCEL_SUFFIXES = (".xlsx", ".xlsm")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_LEADING_ZERO = re.compile(r"0\d")
_CURRENCY = "$€£¥"


def _suffix(path: str) -> str:
    return os.path.splitext(path)[1].lower()


# -- values -------------------------------------------------------------------------------------


def to_number(value: Any) -> int | float | Any | None:
    """A number from ``value`` when it reads as one (``"1,234.5"``, ``"12%"``, ``"$3"``, ``"(5)"`` =
    -5); ``None`` for blanks and NA markers; anything else unchanged."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return None if isinstance(value, float) and math.isnan(value) else value
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.lower() in MISSING:
        return None
    negative = text.startswith("(") and text.endswith(")")
    core = text.strip("()").strip().rstrip("%").strip()
    sign = core[0] if core[:1] in ("-", "+") else ""
    core = core.removeprefix(sign).strip().lstrip(_CURRENCY).strip().replace(",", "").replace("_", "")
    if not _NUMBER.fullmatch(core) or _LEADING_ZERO.match(core):  # "00123" is a code, not a number
        return value
    number: int | float = float(sign + core) if any(c in core for c in ".eE") else int(sign + core)
    return -number if negative else number


def excel_date(serial: float) -> datetime.date:
    """The date of an Excel serial day number (the 1900 date system Excel uses by default)."""
    return datetime.date(1899, 12, 30) + datetime.timedelta(days=int(serial))


def _convert_row(row: dict[str, Any]) -> Row:
    return {key: to_number(value) for key, value in row.items()}


# -- reading ------------------------------------------------------------------------------------


def load(path: str, sheet: str | int | None = None, **kwargs: Any) -> Any:
    """A pandas DataFrame of the table at ``path`` (CSV/TSV, Parquet, Excel, JSON, JSON lines).
    Extra arguments go to pandas' reader. Raises ImportError without pandas: use :func:`read_rows`."""
    if pd is None:
        raise ImportError("pandas is not installed here: use read_rows(path) for plain rows")
    suffix = _suffix(path)
    if suffix == ".parquet":
        return pd.read_parquet(path, **kwargs)
    if suffix in EXCEL_SUFFIXES or suffix == ".xls":
        return pd.read_excel(path, sheet_name=0 if sheet is None else sheet, **kwargs)
    if suffix in JSON_LINES_SUFFIXES:
        return pd.read_json(path, lines=True, **kwargs)
    if suffix == ".json":
        return pd.DataFrame(_json_records(path))
    kwargs.setdefault("sep", _sniff_delimiter(path))
    return pd.read_csv(path, **kwargs)


def clean_numbers(df: Any, columns: Sequence[str] | None = None) -> Any:
    """A copy of the DataFrame ``df`` in which each text column (of ``columns``, default all) whose
    values all read as numbers (``"1,234"``, ``"12%"``, ``"$3"``, blanks) holds those numbers."""
    out = df.copy()
    for name in columns if columns is not None else list(out.columns):
        if out[name].dtype.kind in "biufc":
            continue
        converted = out[name].map(to_number)
        present = converted.dropna()
        if len(present) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
            out[name] = pd.to_numeric(converted)
    return out


def iter_rows(path: str, sheet: str | int | None = None, delimiter: str | None = None) -> Iterator[Row]:
    """The rows of the table at ``path`` one by one, as dicts with numbers converted."""
    suffix = _suffix(path)
    if suffix in EXCEL_SUFFIXES:
        yield from _xlsx_rows(path, sheet)
    elif suffix == ".parquet":
        yield from _parquet_rows(path)
    elif suffix in JSON_LINES_SUFFIXES:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield _convert_row(json.loads(line))
    elif suffix == ".json":
        for record in _json_records(path):
            yield _convert_row(record)
    else:
        with open(path, newline="", encoding="utf-8-sig", errors="replace") as handle:
            for row in csv.DictReader(handle, delimiter=delimiter or _sniff_delimiter(path)):
                yield _convert_row({key: value for key, value in row.items() if key is not None})


def read_rows(
    path: str, sheet: str | int | None = None, limit: int | None = None, delimiter: str | None = None
) -> list[Row]:
    """The rows of the table at ``path`` (at most ``limit``), as a list of dicts with numbers converted."""
    rows: list[Row] = []
    for row in iter_rows(path, sheet, delimiter):
        if limit is not None and len(rows) >= limit:
            break
        rows.append(row)
    return rows


def sheet_names(path: str) -> list[str]:
    """The sheet names of an .xlsx workbook, in order."""
    with zipfile.ZipFile(path) as book:
        return [name for name, _ in _xlsx_sheets(book)]


def _sniff_delimiter(path: str) -> str:
    if _suffix(path) == ".tsv":
        return "\t"
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as handle:
        sample = handle.read(64 * 1024)
    try:
        return csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
    except csv.Error:
        return ","


def _json_records(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if isinstance(data, dict):  # {"rows": [...]} or {"data": [...]}: the first list of objects
        data = next((value for value in data.values() if isinstance(value, list)), [data])
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise ValueError(f"{path}: expected a list of objects")
    return data


def _parquet_rows(path: str) -> Iterator[Row]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        if pd is None:
            raise ImportError("reading Parquet needs pyarrow (or pandas with pyarrow); neither is installed") from None
        yield from (_convert_row(row) for row in pd.read_parquet(path).to_dict("records"))
        return
    for batch in pq.ParquetFile(path).iter_batches():
        yield from (_convert_row(row) for row in batch.to_pylist())


# -- Excel without openpyxl ---------------------------------------------------------------------

_MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_PKG = "{http://schemas.openxmlformats.org/package/2006/relationships}"


def _xlsx_rows(path: str, sheet: str | int | None) -> Iterator[Row]:
    try:
        import openpyxl
    except ImportError:
        yield from _xlsx_rows_stdlib(path, sheet)
        return
    book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        names = book.sheetnames
        chosen = names[sheet] if isinstance(sheet, int) else sheet or names[0]
        values = book[chosen].iter_rows(values_only=True)
        header = _header(next(values, ()))
        for cells in values:
            if any(cell is not None for cell in cells):
                yield _convert_row(dict(zip(header, cells, strict=False)))
    finally:
        book.close()


def _xlsx_sheets(book: zipfile.ZipFile) -> list[tuple[str, str]]:
    """(name, path in the zip) of each sheet."""
    workbook = ElementTree.fromstring(book.read("xl/workbook.xml"))
    rels = ElementTree.fromstring(book.read("xl/_rels/workbook.xml.rels"))
    targets = {rel.get("Id"): rel.get("Target", "") for rel in rels.iter(f"{_PKG}Relationship")}
    sheets = []
    for item in workbook.iter(f"{_MAIN}sheet"):
        target = targets.get(item.get(f"{_REL}id"), "").lstrip("/")
        sheets.append((item.get("name", ""), target if target.startswith("xl/") else f"xl/{target}"))
    return sheets


def _xlsx_rows_stdlib(path: str, sheet: str | int | None) -> Iterator[Row]:
    with zipfile.ZipFile(path) as book:
        sheets = _xlsx_sheets(book)
        if isinstance(sheet, int):
            target = sheets[sheet][1]
        elif sheet is None:
            target = sheets[0][1]
        else:
            target = next((where for name, where in sheets if name == sheet), "")
            if not target:
                raise KeyError(f"no sheet {sheet!r}; sheets: {[name for name, _ in sheets]}")
        shared = _shared_strings(book)
        grid = [_xlsx_row(row, shared) for row in ElementTree.fromstring(book.read(target)).iter(f"{_MAIN}row")]
    if not grid:
        return
    header = _header(grid[0])
    for cells in grid[1:]:
        if any(cell is not None for cell in cells):
            yield _convert_row(dict(zip(header, cells, strict=False)))


def _shared_strings(book: zipfile.ZipFile) -> list[str]:
    try:
        root = ElementTree.fromstring(book.read("xl/sharedStrings.xml"))
    except KeyError:
        return []
    return ["".join(text.text or "" for text in item.iter(f"{_MAIN}t")) for item in root.iter(f"{_MAIN}si")]


def _xlsx_row(row: ElementTree.Element, shared: list[str]) -> list[Any]:
    cells: list[Any] = []
    for cell in row.iter(f"{_MAIN}c"):
        column = _column_index(cell.get("r", "")) if cell.get("r") else len(cells)
        cells.extend([None] * (column - len(cells)))
        kind, value = cell.get("t", "n"), cell.find(f"{_MAIN}v")
        text = value.text if value is not None else None
        if kind == "s" and text is not None:
            cells.append(shared[int(text)])
        elif kind == "inlineStr":
            cells.append("".join(t.text or "" for t in cell.iter(f"{_MAIN}t")))
        elif kind == "b":
            cells.append(text == "1")
        else:
            cells.append(text)
    return cells


def _column_index(reference: str) -> int:
    index = 0
    for char in reference:
        if not char.isalpha():
            break
        index = index * 26 + ord(char.upper()) - ord("A") + 1
    return index - 1


def _header(cells: Sequence[Any]) -> list[str]:
    names, seen = [], set()
    for position, cell in enumerate(cells):
        name = str(cell).strip() if cell is not None and str(cell).strip() else f"column_{position + 1}"
        while name in seen:
            name += "_"
        seen.add(name)
        names.append(name)
    return names


# -- profiling and aggregation ------------------------------------------------------------------


def columns(rows: Iterable[Row]) -> list[str]:
    """Every column name, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)


def profile(source: str | Sequence[Row], limit: int | None = None) -> str:
    """A short text profile of a table (a path or rows): row count, then per column its type, missing
    values, distinct values and either the numeric range and mean or the most common values."""
    rows = read_rows(source, limit=limit) if isinstance(source, str) else list(source)
    names = columns(rows)
    lines = [f"{len(rows)} rows, {len(names)} columns"]
    for name in names:
        values = [row.get(name) for row in rows]
        present = [value for value in values if value is not None]
        numbers = [value for value in present if isinstance(value, int | float) and not isinstance(value, bool)]
        kind = "empty" if not present else "number" if len(numbers) == len(present) else "text"
        if numbers and len(numbers) != len(present):
            kind = f"mixed ({len(numbers)} numbers)"
        line = f"- {name}: {kind}, {len(values) - len(present)} missing, {len(set(map(str, present)))} distinct"
        if numbers and kind == "number":
            line += f", min {min(numbers)}, max {max(numbers)}, mean {statistics.fmean(numbers):.4g}"
        elif present:
            counts: dict[str, int] = {}
            for value in present:
                counts[str(value)] = counts.get(str(value), 0) + 1
            top = sorted(counts.items(), key=lambda item: -item[1])[:3]
            line += ", top: " + ", ".join(f"{value[:40]!r} ({count})" for value, count in top)
        lines.append(line)
    return "\n".join(lines)


_HOWS = {
    "sum": lambda values: sum(values),
    "mean": lambda values: statistics.fmean(values) if values else None,
    "median": lambda values: statistics.median(values) if values else None,
    "min": lambda values: min(values) if values else None,
    "max": lambda values: max(values) if values else None,
    "count": len,
    "nunique": lambda values: len(set(values)),
}


def aggregate(rows: Iterable[Row], by: str | Sequence[str], values: dict[str, str]) -> list[Row]:
    """Group ``rows`` by the column(s) ``by`` and reduce each column of ``values`` ({column: how},
    how one of sum, mean, median, min, max, count, nunique). Missing values are left out of each
    reduction (count counts the present ones). Returns one row per group, sorted by the keys."""
    keys = [by] if isinstance(by, str) else list(by)
    unknown = sorted(set(values.values()) - set(_HOWS))
    if unknown:
        raise ValueError(f"unknown aggregation {unknown}; use one of {sorted(_HOWS)}")
    groups: dict[tuple[Any, ...], dict[str, list[Any]]] = {}
    for row in rows:
        group = groups.setdefault(tuple(row.get(key) for key in keys), {column: [] for column in values})
        for column in values:
            if row.get(column) is not None:
                group[column].append(row[column])
    result = []
    for key in sorted(groups, key=lambda k: tuple((value is None, str(value)) for value in k)):
        out: Row = dict(zip(keys, key, strict=True))
        for column, how in values.items():
            collected = groups[key][column]
            if how in ("sum", "mean", "median") and not all(isinstance(v, int | float) for v in collected):
                raise TypeError(f"column {column!r} holds non-numbers; clean it with to_number first")
            out[column] = _HOWS[how](collected)
        result.append(out)
    return result


# -- output -------------------------------------------------------------------------------------


def write_csv(rows: Sequence[Row], path: str, columns_order: Sequence[str] | None = None) -> str:
    """Write ``rows`` to a CSV file at ``path`` (parent directories made); returns the path."""
    names = list(columns_order) if columns_order is not None else columns(rows)
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=names, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


def markdown_table(rows: Sequence[Row], columns_order: Sequence[str] | None = None, limit: int = 20) -> str:
    """A Markdown table of the first ``limit`` rows (and a note of how many were left out)."""
    names = list(columns_order) if columns_order is not None else columns(rows)
    out = io.StringIO()
    out.write("| " + " | ".join(names) + " |\n")
    out.write("| " + " | ".join("---" for _ in names) + " |\n")
    for row in rows[:limit]:
        out.write("| " + " | ".join(_cell(row.get(name)) for name in names) + " |\n")
    if len(rows) > limit:
        out.write(f"\n({len(rows) - limit} more rows)\n")
    return out.getvalue()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:,.2f}".rstrip("0").rstrip(".") if abs(value) >= 0.01 else f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\n", " ")
