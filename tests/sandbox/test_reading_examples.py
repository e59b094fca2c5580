"""The example read under the manifest runs in the sandbox as written, imports included: a small model
pastes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet_rlm.sandbox.local import LocalSandbox
from fleet_rlm.workspace.hashing import DigestCache
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.manifest import build_manifest
from fleet_rlm.workspace.reading import example_read

INPUTS = {
    "orders.csv": ("id,amount\n1,2\n3,4\n", "print(int(df['amount'].sum()))", "6"),
    "orders.tsv": ("id\tamount\n1\t2\n3\t4\n", "print(int(df['amount'].sum()))", "6"),
    "config.json": ('{"a": 1}', "print(data['a'])", "1"),
    "events.jsonl": ('{"a": 1}\n{"a": 2}\n', "print(int(df['a'].sum()))", "3"),
    "notes.txt": ("hello\n", "print(text.strip())", "hello"),
}


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_the_example_read_runs_in_the_sandbox(sandbox: LocalSandbox, workspace: Path, name: str) -> None:
    body, use, printed = INPUTS[name]
    (workspace / "files" / name).write_text(body)
    read = example_read(build_manifest(Workspace(workspace), cache=DigestCache()))

    assert sandbox.execute(f"{read}\n{use}") == printed


def test_the_example_read_of_a_join_runs_in_the_sandbox(sandbox: LocalSandbox, workspace: Path) -> None:
    (workspace / "files" / "orders.csv").write_text("id,customer_id\n1,7\n2,7\n3,8\n")
    (workspace / "files" / "customers.csv").write_text("customer_id,tier\n7,gold\n8,silver\n")
    entries = build_manifest(Workspace(workspace), cache=DigestCache())
    read = example_read(entries, "Join orders.csv with customers.csv.")

    joined = "print(len(df_orders.merge(df_customers, on='customer_id').query('tier == \"gold\"')))"
    assert sandbox.execute(f"{read}\n{joined}") == "2"
