"""How the model is shown to read a workspace file: a line of Python under the manifest.

Small models took the ``workspace`` variable (the manifest's text) for the data itself and indexed
it as rows; one example read of a real input file, by its path, sends them to the file.
"""

from __future__ import annotations

from collections.abc import Sequence

from fleet_rlm.workspace.kinds import FileKind
from fleet_rlm.workspace.manifest import ManifestEntry, render_manifest

_READERS: dict[FileKind, str] = {
    FileKind.CSV: "pd.read_csv({path})",
    FileKind.TSV: "pd.read_csv({path}, sep='\\t')",
    FileKind.JSON: "json.load(open({path}))",
    FileKind.JSONL: "pd.read_json({path}, lines=True)",
    FileKind.PARQUET: "pd.read_parquet({path})",
    FileKind.SPREADSHEET: "pd.read_excel({path})",
    FileKind.SQLITE: "sqlite3.connect({path})",
    FileKind.PDF: "pypdf.PdfReader({path})",
}
_TEXT_READER = "open({path}).read()"
_BINARY_READER = "open({path}, 'rb').read()"
_TEXT_LIKE = frozenset({FileKind.TEXT, FileKind.MARKDOWN, FileKind.CODE})


def read_call(entry: ManifestEntry) -> str:
    """The Python expression that opens ``entry`` by its path, for the file's kind."""
    template = _READERS.get(entry.kind) or (_TEXT_READER if entry.kind in _TEXT_LIKE else _BINARY_READER)
    return template.format(path=repr(entry.path))


def first_read(entries: Sequence[ManifestEntry]) -> str:
    """:func:`read_call` of the first input file (under ``files/``), else of the first file; ``""`` when
    there is no file."""
    if not entries:
        return ""
    return read_call(next((e for e in entries if e.path.startswith("files/")), entries[0]))


def model_manifest(entries: Sequence[ManifestEntry]) -> str:
    """The manifest as the model sees it: :func:`render_manifest`, then a line that says it is a listing
    and shows how to read an input file (:func:`first_read`)."""
    listing = render_manifest(entries)
    read = first_read(entries)
    if not read:
        return listing
    return f"{listing}\n\n(This listing describes the files; it is not their data. Read a file by its path, e.g. `{read}`.)"
