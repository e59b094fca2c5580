"""How the model is shown to read a workspace file: a line of Python under the manifest.

Small models took the ``workspace`` variable (the manifest's text) for the data itself and indexed
it as rows; one example read of a real input file, by its path, sends them to the file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from fleet_rlm.workspace.kinds import FileKind
from fleet_rlm.workspace.manifest import ManifestEntry, render_manifest
from fleet_rlm.workspace.previews import TablePreview

_READERS: dict[FileKind, tuple[str, str]] = {
    FileKind.CSV: ("import pandas as pd", "df = pd.read_csv({path})"),
    FileKind.TSV: ("import pandas as pd", "df = pd.read_csv({path}, sep='\\t')"),
    FileKind.JSON: ("import json", "data = json.load(open({path}))"),
    FileKind.JSONL: ("import pandas as pd", "df = pd.read_json({path}, lines=True)"),
    FileKind.PARQUET: ("import pandas as pd", "df = pd.read_parquet({path})"),
    FileKind.SPREADSHEET: ("import pandas as pd", "df = pd.read_excel({path})"),
    FileKind.SQLITE: ("import sqlite3", "db = sqlite3.connect({path})"),
    FileKind.PDF: ("import pypdf", "pdf = pypdf.PdfReader({path})"),
}
_TEXT_READER = ("", "text = open({path}).read()")
_BINARY_READER = ("", "data = open({path}, 'rb').read()")
_TEXT_LIKE = frozenset({FileKind.TEXT, FileKind.MARKDOWN, FileKind.CODE})
INPUTS = "files/"
MAX_READS = 4
"""Files the example read opens at most, when the task names several."""
MAX_TABLES = 6
"""Input tables whose headers :func:`input_tables` gives at most."""
_NON_WORD = re.compile(r"\W")


def _reader(entry: ManifestEntry) -> tuple[str, str]:
    return _READERS.get(entry.kind) or (_TEXT_READER if entry.kind in _TEXT_LIKE else _BINARY_READER)


def _reads(entries: Sequence[ManifestEntry]) -> str:
    """The Python (imports first, once each) that opens each of ``entries`` by its path. With several, each
    goes to a variable named after its file (``df_orders``, ``df_customers``), so that a join reads both."""
    imports: list[str] = []
    statements: list[str] = []
    for entry in entries:
        module, statement = _reader(entry)
        if module and module not in imports:
            imports.append(module)
        variable, rest = statement.split(" = ", 1)
        if len(entries) > 1:
            stem = entry.path.rsplit("/", 1)[-1].split(".", 1)[0]
            variable = f"{variable}_{_NON_WORD.sub('_', stem).lower()}"
            if any(made.startswith(f"{variable} = ") for made in statements):
                variable = f"{variable}_{len(statements) + 1}"
        statements.append(f"{variable} = {rest.format(path=repr(entry.path))}")
    return "; ".join([*imports, *statements])


def input_paths(entries: Sequence[ManifestEntry]) -> list[str]:
    """The paths of the input files (under ``files/``)."""
    return [entry.path for entry in entries if entry.path.startswith(INPUTS)]


def input_tables(entries: Sequence[ManifestEntry]) -> dict[str, tuple[str, ...]]:
    """The header of each input table (CSV, TSV) the manifest previews, by path, up to :data:`MAX_TABLES`."""
    tables = [
        (entry.path, entry.preview.header)
        for entry in entries
        if entry.path.startswith(INPUTS) and isinstance(entry.preview, TablePreview)
    ]
    return dict(tables[:MAX_TABLES])


def names_file(text: str, path: str) -> bool:
    """Whether ``text`` names the file at ``path``: by its whole path, or by its file name when that has an
    extension (``orders.csv``, not ``orders.csv.bak``; ``files/orders``, never the word ``orders``)."""
    name = path.rsplit("/", 1)[-1]
    whole = re.escape(path if "." not in name.strip(".") else name)
    return re.search(rf"(?<![\w.-]){whole}(?![\w-]|\.\w)", text) is not None


def example_read(entries: Sequence[ManifestEntry], task: str = "") -> str:
    """The Python that reads the input files ``task`` names (up to :data:`MAX_READS`, each to its own
    variable when there are several), else the first input file, else the first file; ``""`` when there
    is no file."""
    if not entries:
        return ""
    inputs = [entry for entry in entries if entry.path.startswith(INPUTS)]
    named = [entry for entry in inputs if names_file(task, entry.path)]
    return _reads(named[:MAX_READS] or (inputs or list(entries))[:1])


def model_manifest(entries: Sequence[ManifestEntry], read: str) -> str:
    """The manifest as the model sees it: :func:`render_manifest`, then a line that says it is a listing
    and shows how to read the input files (``read``, from :func:`example_read`)."""
    listing = render_manifest(entries)
    if not read:
        return listing
    return f"{listing}\n\n(This listing describes the files; it is not their data. Read a file by its path, e.g. `{read}`.)"
