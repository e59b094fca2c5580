"""The line under the manifest the model sees: it is a listing, and this is how a file is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet_rlm.workspace.hashing import DigestCache
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.manifest import build_manifest, render_manifest
from fleet_rlm.workspace.reading import first_read, model_manifest


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace.create(tmp_path / "ws")


@pytest.mark.parametrize(
    ("name", "body", "read"),
    [
        ("orders.csv", "id,amount\n1,2\n", "pd.read_csv('files/orders.csv')"),
        ("orders.tsv", "id\tamount\n1\t2\n", "pd.read_csv('files/orders.tsv', sep='\\t')"),
        ("config.json", '{"a": 1}', "json.load(open('files/config.json'))"),
        ("events.jsonl", '{"a": 1}\n{"a": 2}\n', "pd.read_json('files/events.jsonl', lines=True)"),
        ("notes.txt", "hello\n", "open('files/notes.txt').read()"),
        ("blob.bin", "\x00\x01\x02", "open('files/blob.bin', 'rb').read()"),
    ],
)
def test_each_kind_of_input_is_read_with_the_call_that_opens_it(ws: Workspace, name: str, body: str, read: str) -> None:
    (ws.files_dir / name).write_text(body)
    entries = build_manifest(ws, cache=DigestCache())

    assert first_read(entries) == read
    text = model_manifest(entries)
    assert text.startswith(render_manifest(entries))
    assert text.endswith(f"it is not their data. Read a file by its path, e.g. `{read}`.)")


def test_an_input_file_is_preferred_and_an_empty_workspace_gets_no_hint(ws: Workspace) -> None:
    assert model_manifest(build_manifest(ws, cache=DigestCache())) == "(no files)"
    (ws.root / "artifacts" / "a.csv").write_text("x\n1\n")
    (ws.files_dir / "z.txt").write_text("input\n")

    assert first_read(build_manifest(ws, cache=DigestCache())) == "open('files/z.txt').read()"


def test_a_hostile_file_name_is_quoted_as_a_python_string(ws: Workspace) -> None:
    (ws.files_dir / "x'); import os; ('.txt").write_text("boom\n")

    read = first_read(build_manifest(ws, cache=DigestCache()))

    assert read == "open(\"files/x'); import os; ('.txt\").read()"
    assert compile(read, "<hint>", "eval")  # one expression: the name cannot end the call
