"""The sandbox environment: what sandbox code can import (the data stack, not Fleet), how it is kept
out of the sandbox's reach, and building one with extra packages."""

from __future__ import annotations

import ast
import fcntl
import re
import sys
import threading
from pathlib import Path

import pytest
from dspy.primitives import CodeExecutionError

from fleet_rlm.config import SandboxSettings, Settings
from fleet_rlm.sandbox.base import SandboxSpec
from fleet_rlm.sandbox.environment import (
    BuildProgress,
    EnvironmentBuildError,
    EnvironmentSpec,
    built_environment,
    ensure_environment,
)
from fleet_rlm.sandbox.environment.spec import LOCK_FILE
from fleet_rlm.sandbox.isolation import WORKER_SOURCE
from fleet_rlm.sandbox.local import LocalSandboxBackend

from .helpers import TEST_LIMITS, SandboxMaker

ANALYSIS = """
import pandas as pd, numpy as np, pyarrow, duckdb, scipy, openpyxl, pypdf
import matplotlib.pyplot as plt
frame = pd.read_csv("files/sales.csv")
totals = frame.groupby("region")["revenue"].sum()
totals.plot.bar()
plt.savefig("chart.png")
print(totals.to_dict(), int(np.sum(frame["revenue"])), plt.get_backend())
"""


def test_sandbox_code_has_the_data_stack(make_sandbox: SandboxMaker, workspace: Path) -> None:
    (workspace / "files" / "sales.csv").write_text("region,revenue\nnorth,10\nsouth,32\nnorth,5\n")
    sandbox = make_sandbox(execution_timeout=60)
    assert sandbox.execute(ANALYSIS) == "{'north': 15, 'south': 32} 47 Agg"
    assert (workspace / "chart.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("module", ["fleet_rlm", "dspy", "pydantic", "litellm"])
def test_fleet_and_the_hosts_packages_cannot_be_imported(make_sandbox: SandboxMaker, module: str) -> None:
    sandbox = make_sandbox()
    with pytest.raises(CodeExecutionError) as failed:
        sandbox.execute(f"import {module}")
    message = str(failed.value)
    assert f"ModuleNotFoundError: No module named '{module}'" in message
    assert f"'{module}' is not installed in the sandbox" in message
    assert re.search(r"other installed packages: .*\bpandas\b", message), message


def test_the_environment_is_read_only_and_the_base_interpreters_packages_are_hidden(
    make_sandbox: SandboxMaker, backend: LocalSandboxBackend
) -> None:
    environment = backend.sandbox_environment()
    assert environment.hidden, "the interpreter's own site-packages are hidden"
    sandbox = make_sandbox()
    probe = (
        "import os, sys\n"
        f"print([os.listdir(d) for d in {list(environment.hidden)!r}])\n"
        "try:\n"
        "    open(os.path.join(sys.prefix, 'planted.py'), 'w')\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__)\n"
        "print(sys.prefix == os.environ.get('VIRTUAL_ENV', sys.prefix), os.environ['MPLBACKEND'])\n"
    )
    hidden_listing, refused, tail = str(sandbox.execute(probe)).splitlines()
    assert hidden_listing == str([[] for _ in environment.hidden])
    assert refused in ("PermissionError", "OSError")
    assert tail == "True Agg"
    assert not (environment.directory / "planted.py").exists()


def test_the_instructions_list_the_environments_packages(backend: LocalSandboxBackend) -> None:
    instructions = backend.execution_instructions
    for name in ("numpy", "pandas", "pyarrow", "duckdb", "matplotlib", "scipy", "openpyxl", "pypdf"):
        assert re.search(rf"\b{name}\b", instructions), name
    assert "dspy" not in instructions and "fleet_rlm" not in instructions
    assert "plt.savefig" in instructions


def test_the_lock_pins_every_wanted_package_with_hashes() -> None:
    wanted = [
        line.strip()
        for line in LOCK_FILE.with_name("requirements.in").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    lock = LOCK_FILE.read_text()
    pinned = re.findall(r"^([A-Za-z0-9._-]+)==\S+(?: ;[^\\]*)? \\\n    --hash=sha256:", lock, flags=re.MULTILINE)
    assert set(wanted) <= set(pinned), "requirements.lock is stale: lock it again (command at its top)"
    assert len(re.findall(r"^[A-Za-z0-9._-]+==", lock, flags=re.MULTILINE)) == len(pinned), "every pin has hashes"


def test_sandbox_packages_are_read_from_the_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FLEET_SANDBOX_PACKAGES", "six xlsxwriter>=3,<4")
    monkeypatch.setenv("FLEET_SANDBOX_ENVIRONMENTS_DIR", str(tmp_path / "envs"))
    settings = Settings(home=tmp_path)
    assert settings.sandbox.packages == ["six", "xlsxwriter>=3,<4"]
    spec = LocalSandboxBackend.from_settings(settings.sandbox).environment
    assert spec.root == tmp_path / "envs"
    assert spec.extra_packages == ("six", "xlsxwriter>=3,<4")
    assert spec.name != EnvironmentSpec(root=tmp_path / "envs").name, "other packages: another environment"
    assert spec.name == EnvironmentSpec(root=spec.root, packages=("xlsxwriter>=3,<4", "six")).name


@pytest.mark.parametrize("package", ["--index-url=http://evil", "pkg @ https://x/y.whl", "./local", "a; os_name=='x'"])
def test_a_package_that_is_not_a_plain_requirement_is_refused(package: str) -> None:
    with pytest.raises(ValueError, match="is not a package"):
        SandboxSettings(packages=[package])


@pytest.mark.timeout(600)
def test_an_extra_package_builds_a_new_environment_where_it_imports(tmp_path: Path, workspace: Path) -> None:
    """A real build (the lock from uv's cache, ``six`` from the index), two builders at once, one of
    them waiting on another process's lock file: one build, used by both."""
    spec = EnvironmentSpec(root=tmp_path / "envs", packages=("six",))
    spec.root.mkdir()
    steps: list[list[BuildProgress]] = [[], []]
    waiting = threading.Event()
    built = []

    def builder(index: int) -> None:
        def report(step: BuildProgress) -> None:
            steps[index].append(step)
            if step.message.startswith("waiting for another process"):
                waiting.set()

        built.append(ensure_environment(spec, report))

    with (spec.root / f"{spec.name}.lock").open("a") as other_process:
        fcntl.flock(other_process, fcntl.LOCK_EX)
        threads = [threading.Thread(target=builder, args=(index,)) for index in range(2)]
        for thread in threads:
            thread.start()
        assert waiting.wait(30), "a builder waits on the lock file"
        assert built_environment(spec) is None
        fcntl.flock(other_process, fcntl.LOCK_UN)
    for thread in threads:
        thread.join(540)
    assert len(built) == 2 and built[0] == built[1]
    venvs_made = [s for run in steps for s in run if s.message == "creating the virtual environment"]
    assert len(venvs_made) == 1, "built once"
    assert [p.name for p in spec.root.iterdir() if p.is_dir()] == [spec.name], "no half-built directory is left"
    assert built[0].version_of("six") and built[0].version_of("pandas")

    sandbox = LocalSandboxBackend(environment=spec).create(SandboxSpec(workspace, limits=TEST_LIMITS))
    try:
        assert sandbox.execute("import six, pandas\nprint(six.__name__)") == "six"
    finally:
        sandbox.shutdown()


def test_a_failed_build_leaves_nothing_behind_and_says_why(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    block = re.search(r"^tabulate==.*?(?=^\S)", LOCK_FILE.read_text(), flags=re.MULTILINE | re.DOTALL)
    assert block is not None
    lock.write_text(block.group(0))
    spec = EnvironmentSpec(root=tmp_path / "envs", packages=("tabulate<0.1",), lock=lock)
    with pytest.raises(EnvironmentBuildError, match="uv pip install` failed"):
        ensure_environment(spec)
    assert [p.name for p in spec.root.iterdir()] == [f"{spec.name}.lock"]


def test_the_worker_needs_nothing_but_the_standard_library() -> None:
    """The worker is mounted on its own, beside an environment that does not hold Fleet."""
    tree = ast.parse(WORKER_SOURCE.read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported, "the worker imports modules"
    assert {name.split(".")[0] for name in imported} <= set(sys.stdlib_module_names) | {"__future__"}
