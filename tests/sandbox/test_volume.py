"""Workspace volumes: bounded in bytes and files, unmounted and removed with their workspace, and
never left behind by a process that died."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleet_rlm.sandbox import owners
from fleet_rlm.sandbox.volume import (
    REGISTRY,
    bounded_volume,
    mounts_under,
    plain_volume,
    quota_support,
    reap_stale_volumes,
)

needs_quota = pytest.mark.skipif(not quota_support().available, reason=f"no disk quota: {quota_support().reason}")


@needs_quota
def test_a_bounded_volume_holds_at_most_its_bytes_and_files(tmp_path: Path) -> None:
    volume = bounded_volume(tmp_path / "v", disk_mb=16, max_files=600)
    try:
        assert mounts_under(tmp_path / "v") == [str((tmp_path / "v" / "volume").resolve())]
        assert os.stat(tmp_path / "v").st_mode & 0o777 == 0o700
        with pytest.raises(OSError, match="No space left"), open(volume.workspace / "big", "wb") as out:
            for _ in range(32):
                out.write(b"x" * (1 << 20))
                out.flush()
        (volume.workspace / "big").unlink()
        with pytest.raises(OSError, match="No space left"):
            for i in range(1000):
                (volume.workspace / f"f{i}").touch()
    finally:
        volume.release()
    assert mounts_under(tmp_path / "v") == []
    assert not (tmp_path / "v").exists()
    assert volume.registration is not None and not volume.registration.exists()


def test_a_plain_volume_is_a_private_directory(tmp_path: Path) -> None:
    volume = plain_volume(tmp_path / "p")
    assert not volume.bounded
    assert volume.workspace.is_dir()
    assert os.stat(tmp_path / "p").st_mode & 0o777 == 0o700
    volume.release()
    assert not (tmp_path / "p").exists()


@needs_quota
def test_the_volume_of_a_dead_process_is_unmounted_and_removed(tmp_path: Path) -> None:
    volume = bounded_volume(tmp_path / "v", disk_mb=16, max_files=1000)
    assert volume.registration is not None
    # The same registration as a process of this pid namespace whose start time no longer matches: dead.
    parts = volume.registration.name.split("-")
    dead = REGISTRY / "-".join([*parts[:3], str(int(parts[3]) + 1), parts[4]])
    volume.registration.rename(dead)
    assert owners.owner_is_dead(dead.name)

    removed = reap_stale_volumes(force=True)

    assert str((tmp_path / "v").resolve()) in removed
    assert mounts_under(tmp_path / "v") == []
    assert not (tmp_path / "v").exists()
    assert not dead.exists()
