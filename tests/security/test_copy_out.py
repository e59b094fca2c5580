"""What the host copies out of a sandbox is bounded by what it cost the sandbox and by totals, end to end.

Sandbox code writes sparse files (megabytes of holes cost its volume nothing) and more dense bytes
than the turn's and the session's bounds, through a real ``fleet serve`` and ``fleet run`` with the
scripted model: the blob store and the directory ``fleet run`` copies back stay small, each skipped
file is named in a ``warning`` with the bound, and everything else is still collected.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.cli import json_events, run_fleet, scripted_env
from tests.kernels.conftest import run_turn
from tests.store.databases import database_url, postgres_databases

from .api_server import StartServer, fleet_serve, http, serve_env
from .conftest import HostCanary

__all__ = ["database_url", "fleet_serve", "postgres_databases", "serve_env"]

MIB = 1024 * 1024
HUGE = 2 * 1024 * 1024 * MIB
"""2 TiB: hashing its zeros would take the host most of an hour."""
HUGE_FILES = {"sandbox_max_file_size_mb": str(4 * 1024 * 1024)}
"""The sandbox may write files this large (its RLIMIT_FSIZE), so only the copy-out bounds stand."""
SPARSE = f"""
import os
for name in ('a', 'b', 'c'):
    with open(f'artifacts/sparse-{{name}}.bin', 'wb') as out:
        out.write(b'head' * 1024)
        out.truncate({HUGE})
        out.seek(-8192, 2)
        out.write(b'tail' * 2048)
open('artifacts/report.txt', 'w').write('the real report')
SUBMIT(answer='written')
"""
MADE_SPARSE = f"""
os.truncate('artifacts/report.txt', {HUGE})
SUBMIT(answer='truncated')
"""


def allocated(tree: Path) -> int:
    """Bytes ``tree``'s files take on disk (what the host paid, holes excluded)."""
    return sum(path.lstat().st_blocks * 512 for path in tree.rglob("*") if path.is_file() and not path.is_symlink())


def warnings(events: list[dict[str, Any]]) -> list[str]:
    return [e["data"]["message"] for e in events if e["type"] == "warning"]


def announced(events: list[dict[str, Any]]) -> list[str]:
    return [e["data"]["path"] for e in events if e["type"] == "artifact.created"]


def two_turns(client: httpx.Client) -> tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, Any]]]:
    """Session ``s``'s turns "first" and "second", then its files by path."""
    client.post("/sessions", json={"name": "s"})
    one = run_turn(client, "s", "first")
    two = run_turn(client, "s", "second")
    return one, two, {item["path"]: item for item in client.get("/sessions/s/files").json()["items"]}


def dense(name: str, mib: float) -> str:
    """Code writing ``mib`` MiB of incompressible bytes to ``artifacts/<name>``."""
    return f"open('artifacts/{name}', 'wb').write(os.urandom({int(mib * MIB)}))\n"


def test_sparse_artifacts_are_neither_read_nor_announced_nor_stored(
    fleet_serve: StartServer,
    model_server: ScriptedModelServer,
    database_url: str,
    home: Path,
    canary: HostCanary,
) -> None:
    server = fleet_serve(
        FLEET_DATABASE_URL=database_url, FLEET_SANDBOX_MAX_FILE_SIZE_MB=HUGE_FILES["sandbox_max_file_size_mb"]
    )
    model_server.script(
        "root", rlm_step("Write sparse files.", SPARSE), rlm_step("Truncate.", "import os\n" + MADE_SPARSE)
    )
    with http(server) as client:
        client.post("/sessions", json={"name": "s"})
        turn = run_turn(client, "s", "write")
        files = {item["path"]: item for item in client.get("/sessions/s/files").json()["items"]}
        report = client.get("/sessions/s/files/artifacts/report.txt")
        # A stored artifact made sparse: the host never hashes its 2 TiB to compare it with the stored one.
        truncated = run_turn(client, "s", "truncate")
        after = {item["path"]: item for item in client.get("/sessions/s/files").json()["items"]}
        kept = client.get("/sessions/s/files/artifacts/report.txt")

    assert turn["status"] == "completed", turn["error"]
    told = warnings(turn["events"])
    for name in ("a", "b", "c"):
        path = f"artifacts/sparse-{name}.bin"
        assert path not in files
        assert any(m.startswith(f"{path} was not copied out of the sandbox: it is sparse") for m in told), told
    assert announced(turn["events"]) == ["artifacts/report.txt"]
    assert [a["path"] for a in turn["artifacts"]] == ["artifacts/report.txt"]
    assert report.status_code == 200 and report.text == "the real report"
    assert truncated["status"] == "completed", truncated["error"]
    assert announced(truncated["events"]) == [] and truncated["artifacts"] == []
    assert [m.split(":")[0] for m in warnings(truncated["events"])] == [
        "artifacts/report.txt was not copied out of the sandbox"
    ]
    assert after == files and kept.text == "the real report"
    assert allocated(home / "sessions") < 16 * MIB
    canary.untouched()


def test_a_stored_artifact_whose_new_version_is_refused_still_counts_toward_the_sessions_bound(
    fleet_serve: StartServer, model_server: ScriptedModelServer, database_url: str, home: Path
) -> None:
    server = fleet_serve(
        FLEET_DATABASE_URL=database_url, FLEET_SANDBOX_COPY_OUT_TURN_MB="3", FLEET_SANDBOX_COPY_OUT_SESSION_MB="5"
    )
    first = "import os\n" + dense("one.bin", 2.5) + "SUBMIT(answer='first')"
    # one.bin's new 3.5 MiB are past the turn's bound, so its stored 2.5 MiB stay: two.bin's 2.75 MiB
    # fit the turn's bound but not what the session has left.
    second = "import os\n" + dense("one.bin", 3.5) + dense("two.bin", 2.75) + "SUBMIT(answer='second')"
    model_server.script("root", rlm_step("Write.", first), rlm_step("Write more.", second))
    with http(server) as client:
        one, two, files = two_turns(client)

    assert one["status"] == "completed" and two["status"] == "completed", (one["error"], two["error"])
    assert warnings(two["events"]) == [
        "artifacts/one.bin was not copied out of the sandbox: it is larger than the 3145728 bytes left under "
        "the turn's bound of 3 MiB (sandbox.copy_out_turn_mb)",
        "artifacts/two.bin was not copied out of the sandbox: it is larger than the 2621440 bytes left under "
        "the session's bound of 5 MiB (sandbox.copy_out_session_mb)",
    ]
    assert two["artifacts"] == []
    assert {path: item["size"] for path, item in files.items()} == {"artifacts/one.bin": int(2.5 * MIB)}
    assert allocated(home / "sessions") < 5 * MIB


def test_the_turn_and_session_bounds_hold_on_copied_out_artifacts(
    fleet_serve: StartServer, model_server: ScriptedModelServer, database_url: str, home: Path
) -> None:
    server = fleet_serve(
        FLEET_DATABASE_URL=database_url, FLEET_SANDBOX_COPY_OUT_TURN_MB="3", FLEET_SANDBOX_COPY_OUT_SESSION_MB="4"
    )
    first = "import os\n" + dense("one.bin", 2) + dense("two.bin", 2) + "SUBMIT(answer='first')"
    second = (
        "import os\n"
        + dense("three.bin", 2.5)
        + "open('artifacts/notes.txt', 'w').write('small notes')\nSUBMIT(answer='second')"
    )
    model_server.script("root", rlm_step("Write.", first), rlm_step("Write more.", second))
    with http(server) as client:
        one, two, files = two_turns(client)
        notes = client.get("/sessions/s/files/artifacts/notes.txt").text
        kept = client.get("/sessions/s/files/artifacts/one.bin").content

    assert one["status"] == "completed" and two["status"] == "completed", (one["error"], two["error"])
    # The turn's bound: one.bin fits its 3 MiB, two.bin no longer does.
    assert warnings(one["events"]) == [
        "artifacts/two.bin was not copied out of the sandbox: it is larger than the 1048576 bytes left under "
        "the turn's bound of 3 MiB (sandbox.copy_out_turn_mb)"
    ]
    assert [a["path"] for a in one["artifacts"]] == ["artifacts/one.bin"]
    # The session's bound: one.bin is kept (2 MiB of 4) and notes.txt (11 bytes) comes first, so
    # three.bin's 2.5 MiB does not fit.
    assert warnings(two["events"]) == [
        "artifacts/three.bin was not copied out of the sandbox: it is larger than the 2097141 bytes left under "
        "the session's bound of 4 MiB (sandbox.copy_out_session_mb)"
    ]
    assert [a["path"] for a in two["artifacts"]] == ["artifacts/notes.txt"]
    assert sorted(files) == ["artifacts/notes.txt", "artifacts/one.bin"]
    assert notes == "small notes"
    assert len(kept) == 2 * MIB and hashlib.sha256(kept).hexdigest() == files["artifacts/one.bin"]["sha256"]
    # The warnings come before each turn's end, in order, and are stored with it.
    assert [e["type"] for e in two["events"]][-2:] == ["warning", "turn.completed"]
    seqs = [e["seq"] for e in two["events"]]
    assert seqs == sorted(set(seqs))
    assert allocated(home / "sessions") < 5 * MIB


def test_fleet_run_brings_back_no_sparse_file_and_nothing_past_the_turns_bound(
    model_server: ScriptedModelServer, tmp_path: Path, canary: HostCanary
) -> None:
    code = SPARSE.replace("SUBMIT(answer='written')", "import os\n" + dense("big.bin", 2) + "SUBMIT(answer='written')")
    model_server.script("root", rlm_step("Write.", code))
    workspace = tmp_path / "ws"

    result = run_fleet(
        ["run", "Write", "--json", "--workspace", str(workspace)],
        tmp_path,
        scripted_env(model_server, sandbox_copy_out_turn_mb="1", **HUGE_FILES),
    )

    assert result.returncode == 0, result.stderr
    events = json_events(result.stdout)
    assert events[-1]["type"] == "turn.completed"
    told = warnings(events)
    assert any(m.startswith("artifacts/big.bin was not copied out of the sandbox: it is larger than") for m in told)
    assert any("(sandbox.copy_out_turn_mb)" in m for m in told)
    for name in ("a", "b", "c"):
        assert any(
            m.startswith(f"artifacts/sparse-{name}.bin was not copied out of the sandbox: it is sparse") for m in told
        )
        assert not (workspace / "artifacts" / f"sparse-{name}.bin").exists()
    assert not (workspace / "artifacts" / "big.bin").exists()
    assert [a["path"] for a in events[-1]["data"]["artifacts"]] == ["artifacts/report.txt"]
    assert "artifacts/report.txt" in announced(events)
    assert not [path for path in announced(events) if "sparse" in path]
    assert (workspace / "artifacts" / "report.txt").read_text() == "the real report"
    assert allocated(workspace) < 4 * MIB
    assert not [p for p in workspace.rglob("*") if p.name.startswith(".incoming-")]
    canary.untouched()


@pytest.mark.parametrize("size", [0, 5, MIB + 3])
def test_fleet_run_still_brings_back_ordinary_files_whole(
    model_server: ScriptedModelServer, tmp_path: Path, size: int
) -> None:
    code = f"import os\ndata = bytes(range(256)) * ({size} // 256) + b'x' * ({size} % 256)\n"
    code += "open('artifacts/out.bin', 'wb').write(data)\nSUBMIT(answer=str(len(data)))"
    model_server.script("root", rlm_step("Write.", code))
    workspace = tmp_path / "ws"

    result = run_fleet(["run", "Write", "--json", "--workspace", str(workspace)], tmp_path, scripted_env(model_server))

    assert result.returncode == 0, result.stderr
    events = json_events(result.stdout)
    assert events[-1]["type"] == "turn.completed" and warnings(events) == []
    expected = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    assert (workspace / "artifacts" / "out.bin").read_bytes() == expected
    assert os.stat(workspace / "artifacts" / "out.bin").st_mode & 0o777 == 0o644
