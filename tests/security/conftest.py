"""What every security test shares: a host canary the sandbox must never reach or reveal."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class HostCanary:
    """A root-only host directory with a secret file, outside every workspace."""

    directory: Path
    secret: Path
    text: str

    def untouched(self) -> None:
        """Nothing was added to, removed from or changed in the canary directory."""
        assert sorted(p.name for p in self.directory.iterdir()) == ["secret.txt"]
        info = self.secret.stat()
        assert (info.st_uid, info.st_gid, info.st_mode & 0o7777) == (0, 0, 0o600)
        assert self.secret.read_text() == self.text
        directory = self.directory.stat()
        assert (directory.st_uid, directory.st_mode & 0o7777) == (0, 0o700)

    def absent_from(self, *texts: str, trees: Iterable[Path] = ()) -> None:
        """The secret appears in none of ``texts`` and in no file below ``trees``."""
        for text in texts:
            assert self.text not in text
        for tree in trees:
            for folder, _, names in os.walk(tree):
                for name in names:
                    path = Path(folder, name)
                    if path.is_file() and not path.is_symlink():
                        assert self.text.encode() not in path.read_bytes(), path


@pytest.fixture
def canary(tmp_path: Path) -> HostCanary:
    if os.geteuid() != 0:
        pytest.skip("the host-side escapes are about a host running as root (as servers and CI do)")
    directory = tmp_path / "host-private"
    directory.mkdir(mode=0o700)
    os.chown(directory, 0, 0)
    secret = directory / "secret.txt"
    text = f"HOST-CANARY-{uuid.uuid4().hex}"
    secret.write_text(text)
    os.chmod(secret, 0o600)
    return HostCanary(directory, secret, text)
