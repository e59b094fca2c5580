"""Sandbox backends by name: ``settings.sandbox_backend`` chooses one.

Each name maps to a loader returning the backend's class, so a backend's module (and whatever it
probes or imports) is loaded only when it is chosen. ``local`` runs code on this machine under
bubblewrap; a backend whose workspace is not a host directory registers here the same way and
implements :meth:`~fleet_rlm.sandbox.base.SandboxBackend.workspace_files` for moving files.
"""

from __future__ import annotations

from collections.abc import Callable

from fleet_rlm.config import Settings
from fleet_rlm.sandbox.base import SandboxBackend

BackendLoader = Callable[[], type[SandboxBackend]]


def _local() -> type[SandboxBackend]:
    from fleet_rlm.sandbox.local import LocalSandboxBackend

    return LocalSandboxBackend


_BACKENDS: dict[str, BackendLoader] = {"local": _local}


class UnknownSandboxBackend(ValueError):
    """``sandbox_backend`` names no registered backend; the message names it and the known ones."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"unknown sandbox backend {name!r} (setting sandbox_backend, FLEET_SANDBOX_BACKEND); "
            f"known backends: {', '.join(backend_names())}"
        )


def backend_names() -> list[str]:
    return sorted(_BACKENDS)


def register_backend(name: str, loader: BackendLoader) -> None:
    """Make ``name`` a valid ``sandbox_backend``; ``loader`` returns the backend's class."""
    _BACKENDS[name] = loader


def backend_class(name: str) -> type[SandboxBackend]:
    loader = _BACKENDS.get(name)
    if loader is None:
        raise UnknownSandboxBackend(name)
    return loader()


def configured_backend(settings: Settings) -> SandboxBackend:
    """The backend ``settings.sandbox_backend`` names, configured from ``settings``."""
    return backend_class(settings.sandbox_backend).from_settings(settings)
