"""What a sandbox environment is made of, and the directory it is kept in (named by a hash of that)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

from fleet_rlm.config import APP_NAME, SandboxSettings

LOCK_FILE = Path(__file__).with_name("requirements.lock")
ROOT_NAME = "sandbox-environments"
FORMAT = 1
"""Bumped when the way environments are built changes, so that older ones are not reused."""


def default_root() -> Path:
    """``sandbox-environments`` in the platform's user data directory."""
    return Path(platformdirs.user_data_dir(APP_NAME)) / ROOT_NAME


def base_interpreter() -> str:
    """The interpreter Fleet runs on, outside any virtual environment: the one sandboxes run."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


@dataclass(frozen=True)
class EnvironmentSpec:
    """The lock file, the extra packages and the interpreter of one environment, and where it is kept."""

    root: Path = field(default_factory=default_root)
    packages: tuple[str, ...] = ()
    lock: Path = LOCK_FILE
    python: str = field(default_factory=base_interpreter)

    @classmethod
    def from_settings(cls, sandbox: SandboxSettings) -> EnvironmentSpec:
        return cls(root=sandbox.environments_dir or default_root(), packages=tuple(sandbox.packages))

    @property
    def extra_packages(self) -> tuple[str, ...]:
        """The extra packages in a canonical order: a reordered list is the same environment."""
        return tuple(sorted(set(self.packages)))

    def key(self) -> str:
        """A digest of everything that makes the environment: the lock, the extras, the interpreter."""
        made_of = {
            "format": FORMAT,
            "lock": hashlib.sha256(self.lock.read_bytes()).hexdigest(),
            "packages": list(self.extra_packages),
            "python": self.python,
            "version": sys.version,
            "machine": platform.machine(),
        }
        return hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest()

    @property
    def name(self) -> str:
        """The environment's directory name: the Python version, then the key's start."""
        return f"py{sys.version_info.major}.{sys.version_info.minor}-{self.key()[:16]}"

    @property
    def directory(self) -> Path:
        return self.root / self.name
