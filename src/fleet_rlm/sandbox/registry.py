"""Sandbox backends by name: ``settings.sandbox.backend`` chooses one.

Each name maps to a loader returning the backend's class, so a backend's module (and whatever it
probes or imports) is loaded only when it is chosen. ``local`` runs code on this machine under
bubblewrap; a backend whose workspace is not a host directory is added to :data:`BACKENDS` the same
way and implements :meth:`~fleet_rlm.sandbox.base.SandboxBackend.workspace_files` for moving files.
"""

from __future__ import annotations

from collections.abc import Callable

from fleet_rlm.config import ConfigError, Settings
from fleet_rlm.sandbox.base import SandboxBackend

BackendLoader = Callable[[], type[SandboxBackend]]


def _local() -> type[SandboxBackend]:
    from fleet_rlm.sandbox.local import LocalSandboxBackend

    return LocalSandboxBackend


BACKENDS: dict[str, BackendLoader] = {"local": _local}
"""Every backend ``sandbox_backend`` may name, by name."""


class UnknownSandboxBackend(ConfigError):
    """``sandbox_backend`` names no registered backend; the message names it and the known ones."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"unknown sandbox backend {name!r} (setting sandbox_backend, FLEET_SANDBOX_BACKEND); "
            f"known backends: {', '.join(backend_names())}"
        )


def backend_names() -> list[str]:
    return sorted(BACKENDS)


def backend_class(name: str) -> type[SandboxBackend]:
    loader = BACKENDS.get(name)
    if loader is None:
        raise UnknownSandboxBackend(name)
    return loader()


def configured_backend_class(settings: Settings) -> type[SandboxBackend]:
    """The class of the backend ``settings.sandbox.backend`` names; raises UnknownSandboxBackend
    (a ConfigError), so commands can refuse a bad name before they start anything."""
    return backend_class(settings.sandbox.backend)


def configured_backend(settings: Settings) -> SandboxBackend:
    """The backend ``settings.sandbox.backend`` names, configured from ``settings``."""
    return configured_backend_class(settings).from_settings(settings.sandbox)
