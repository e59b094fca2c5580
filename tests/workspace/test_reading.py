"""The line under the manifest the model sees: it is a listing, and this is how a file is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet_rlm.workspace.hashing import DigestCache
from fleet_rlm.workspace.kinds import FileKind
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.manifest import ManifestEntry, build_manifest, render_manifest
from fleet_rlm.workspace.reading import example_read, model_manifest, names_file


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace.create(tmp_path / "ws")


@pytest.mark.parametrize(
    ("name", "body", "read"),
    [
        ("orders.csv", "id,amount\n1,2\n", "import pandas as pd; df = pd.read_csv('files/orders.csv')"),
        ("orders.tsv", "id\tamount\n1\t2\n", "import pandas as pd; df = pd.read_csv('files/orders.tsv', sep='\\t')"),
        ("config.json", '{"a": 1}', "import json; data = json.load(open('files/config.json'))"),
        (
            "events.jsonl",
            '{"a": 1}\n{"a": 2}\n',
            "import pandas as pd; df = pd.read_json('files/events.jsonl', lines=True)",
        ),
        ("notes.txt", "hello\n", "text = open('files/notes.txt').read()"),
        ("blob.bin", "\x00\x01\x02", "data = open('files/blob.bin', 'rb').read()"),
    ],
)
def test_each_kind_of_input_is_read_with_the_code_that_opens_it(ws: Workspace, name: str, body: str, read: str) -> None:
    (ws.files_dir / name).write_text(body)
    entries = build_manifest(ws, cache=DigestCache())

    assert example_read(entries) == read
    text = model_manifest(entries, read)
    assert text.startswith(render_manifest(entries))
    assert text.endswith(f"it is not their data. Read a file by its path, e.g. `{read}`.)")


def entry(path: str, kind: FileKind = FileKind.TEXT) -> ManifestEntry:
    return ManifestEntry(path=path, size=1, mtime_ns=0, sha256="0" * 64, kind=kind, preview=None)


def test_the_file_the_task_names_is_preferred_then_any_input(ws: Workspace) -> None:
    empty = build_manifest(ws, cache=DigestCache())
    assert example_read(empty) == ""
    assert model_manifest(empty, "") == "(no files)"
    entries = [entry("artifacts/a.txt"), entry("files/0000_read_me.txt"), entry("files/sales.csv", FileKind.CSV)]

    assert example_read(entries) == "text = open('files/0000_read_me.txt').read()"
    assert example_read(entries, "Total of sales.csv?") == "import pandas as pd; df = pd.read_csv('files/sales.csv')"
    assert example_read(entries[:1]) == "text = open('artifacts/a.txt').read()"


def test_every_file_a_join_names_is_read_into_its_own_variable() -> None:
    """Seen with a real 1.5B model on a join of two files: shown the read of one, it never read the other."""
    entries = [
        entry("files/orders.csv", FileKind.CSV),
        entry("files/customers.csv", FileKind.CSV),
        entry("files/orders.tsv", FileKind.TSV),
        entry("files/2024 notes.txt"),
    ]
    task = "files/orders.csv lists orders; customers.csv, orders.tsv and 2024 notes.txt the rest."

    assert example_read(entries, task) == (
        "import pandas as pd; df_orders = pd.read_csv('files/orders.csv'); "
        "df_customers = pd.read_csv('files/customers.csv'); df_orders_3 = pd.read_csv('files/orders.tsv', sep='\\t'); "
        "text_2024_notes = open('files/2024 notes.txt').read()"
    )
    many = [entry(f"files/part{n}.csv", FileKind.CSV) for n in range(9)]
    read = example_read(many, " ".join(f"part{n}.csv" for n in range(9)))
    assert read.count("pd.read_csv(") == 4
    assert "import pandas as pd; df_part0 = " in read


def test_a_hostile_file_name_is_written_as_a_python_string(ws: Workspace) -> None:
    (ws.files_dir / "x'); import os; ('.txt").write_text("boom\n")

    read = example_read(build_manifest(ws, cache=DigestCache()))

    assert read == "text = open(\"files/x'); import os; ('.txt\").read()"
    assert compile(read, "<hint>", "exec")


@pytest.mark.parametrize(
    ("text", "path", "named"),
    [
        ("Sum files/orders.csv.", "files/orders.csv", True),
        ("Sum orders.csv, then stop", "files/orders.csv", True),
        ("pd.read_csv('orders.csv')", "files/orders.csv", True),
        ("Compare orders.csv.bak", "files/orders.csv", False),
        ("Read big_orders.csv", "files/orders.csv", False),
        ("Read data.csv", "files/a.csv", False),
        ("How many orders?", "files/orders", False),
        ("Count lines of files/orders", "files/orders", True),
    ],
)
def test_a_file_is_named_by_its_whole_name_or_path(text: str, path: str, named: bool) -> None:
    assert names_file(text, path) is named
