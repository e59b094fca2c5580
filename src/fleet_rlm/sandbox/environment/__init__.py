"""The sandbox environment: the Python packages sandbox code can import, built by the host from the lock
file beside this module (plus ``sandbox_packages``), kept under a key and mounted read-only into every
sandbox in place of Fleet's own environment (docs/sandbox.md, "The environment")."""

from fleet_rlm.sandbox.environment.build import EnvironmentBuildError, built_environment, ensure_environment
from fleet_rlm.sandbox.environment.manifest import SandboxEnvironment
from fleet_rlm.sandbox.environment.spec import EnvironmentSpec
from fleet_rlm.sandbox.progress import BuildProgress, Progress

__all__ = [
    "BuildProgress",
    "EnvironmentBuildError",
    "EnvironmentSpec",
    "Progress",
    "SandboxEnvironment",
    "built_environment",
    "ensure_environment",
]
