"""A built environment as sandboxes use it, read from the manifest the build leaves in it.

The manifest records what the interpreter would otherwise be asked at every start (its prefixes and
import path), which package directories of the host to hide, and each installed distribution's
version (read from its metadata: nothing installed is imported on the host).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # isolation loads the sandbox seam (and DSPy): `fleet chat` checks readiness without it
    from fleet_rlm.sandbox.isolation import PythonRuntime

MANIFEST = "fleet-environment.json"
PYTHON = "bin/python"
# Run by the environment's interpreter with -I -S: the standard library only, no site-packages and no
# .pth file, so no installed package's code runs on the host. Without site, sys.prefix is the base
# installation's; the environment's own directories are those of its scheme at its root (argv[1]).
PROBE = """
import json, site, sys, sysconfig
root = sys.argv[1]
bases = [sys.base_prefix, sys.base_exec_prefix]
own = sysconfig.get_paths(vars={"base": root, "platbase": root})
hidden = set(site.getsitepackages(bases))
for scheme in sysconfig.get_scheme_names():
    if scheme.startswith("posix"):
        paths = sysconfig.get_paths(scheme, vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
        hidden.update((paths["purelib"], paths["platlib"]))
print(json.dumps({
    "version": sys.version.split()[0],
    "prefixes": [root, *bases],
    "path": [*sys.path, own["purelib"], own["platlib"]],
    "hidden": sorted(hidden),
}))
"""
# Where other interpreters of the host keep their packages (Debian's dist-packages among them).
HOST_PACKAGE_GLOBS = ("/usr/lib/python3*/*-packages", "/usr/local/lib/python3*/*-packages")


KEY_PACKAGES = ("numpy", "pandas", "pyarrow", "duckdb", "matplotlib", "scipy", "openpyxl", "pypdf")
"""The packages named when an environment is described (`fleet doctor`, `fleet sandbox build`)."""


class ManifestError(RuntimeError):
    """A built environment's manifest is missing or unreadable."""


@dataclass(frozen=True)
class SandboxEnvironment:
    """A built environment: where it is, its interpreter, and what it holds."""

    directory: Path
    key: str
    python_version: str
    prefixes: tuple[str, ...]
    path: tuple[str, ...]
    hidden: tuple[str, ...]
    distributions: tuple[tuple[str, str], ...]
    """(name, version) of every installed distribution, by name."""
    extra_packages: tuple[str, ...]
    build_seconds: float

    @property
    def python(self) -> str:
        return str(self.directory / PYTHON)

    def runtime(self) -> PythonRuntime:
        """How workers run on this environment: its interpreter and directories, the host's packages hidden."""
        from fleet_rlm.sandbox.isolation import PythonRuntime

        return PythonRuntime(self.python, self.prefixes, self.path, self.hidden)

    def summary(self) -> str:
        """Python's version, the key packages' versions, then the extra ones (``sandbox_packages``)."""
        shown = [f"{name} {self.version_of(name)}" for name in KEY_PACKAGES if self.version_of(name)]
        extras = f"; extra: {' '.join(self.extra_packages)}" if self.extra_packages else ""
        return f"Python {self.python_version}, {len(self.distributions)} packages: {', '.join(shown)}{extras}"

    def version_of(self, name: str) -> str | None:
        wanted = _normal(name)
        return next((version for found, version in self.distributions if _normal(found) == wanted), None)

    @classmethod
    def load(cls, directory: Path, key: str) -> SandboxEnvironment | None:
        """The environment built at ``directory`` for ``key``; None when there is none (or another one)."""
        try:
            data = json.loads((directory / MANIFEST).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("key") != key or not (directory / PYTHON).exists():
            return None
        try:
            return cls(
                directory=directory,
                key=key,
                python_version=str(data["python_version"]),
                prefixes=tuple(_place(directory, entry) for entry in data["prefixes"]),
                path=tuple(_place(directory, entry) for entry in data["path"]),
                hidden=tuple(str(entry) for entry in data["hidden"]),
                distributions=tuple((str(name), str(version)) for name, version in data["distributions"]),
                extra_packages=tuple(str(package) for package in data["extra_packages"]),
                build_seconds=float(data["build_seconds"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


def write_manifest(
    directory: Path, key: str, extra_packages: tuple[str, ...], build_seconds: float, env: dict[str, str]
) -> None:
    """Probe the environment's interpreter (stdlib only) and record what sandboxes need to know."""
    python = directory / PYTHON
    try:
        found = subprocess.run(
            [str(python), "-I", "-S", "-c", PROBE, str(directory)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env=env,
        )
        probed: dict[str, Any] = json.loads(found.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise ManifestError(f"the environment's interpreter {python} cannot be probed: {exc}") from exc
    root = os.path.realpath(directory)
    prefixes = sorted({_relative(root, os.path.realpath(p)) for p in probed["prefixes"] if p})
    path = [_relative(root, os.path.realpath(p)) for p in probed["path"] if p and os.path.exists(p)]
    hidden = {os.path.realpath(p) for p in probed["hidden"]}
    hidden.update(os.path.realpath(p) for pattern in HOST_PACKAGE_GLOBS for p in glob.glob(pattern))
    manifest = {
        "key": key,
        "python_version": probed["version"],
        "prefixes": prefixes,
        "path": list(dict.fromkeys(path)),
        "hidden": sorted(p for p in hidden if os.path.isdir(p) and not _inside(p, root) and not _inside(root, p)),
        "distributions": distributions(directory, [p for p in path if not os.path.isabs(p)]),
        "extra_packages": list(extra_packages),
        "build_seconds": round(build_seconds, 1),
    }
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def distributions(directory: Path, site_dirs: list[str]) -> list[tuple[str, str]]:
    """(name, version) of each distribution installed in the environment's package directories."""
    found: dict[str, tuple[str, str]] = {}
    for site_dir in site_dirs:
        for metadata in sorted((directory / site_dir).glob("*.dist-info/METADATA")):
            headers = HeaderParser().parsestr(metadata.read_text(errors="replace"), headersonly=True)
            name, version = headers.get("Name"), headers.get("Version")
            if name and version:
                found.setdefault(_normal(name), (name, version))
    return [found[key] for key in sorted(found)]


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _relative(root: str, path: str) -> str:
    """Paths inside the environment are kept relative: it is built elsewhere and moved into place."""
    return os.path.relpath(path, root) if _inside(path, root) else path


def _place(directory: Path, entry: str) -> str:
    return entry if os.path.isabs(entry) else os.path.normpath(os.path.join(directory, entry))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)
