"""``fleet sandbox build``: build the sandbox environment now, with a progress bar, instead of at the first
sandbox (docs/sandbox.md, "The environment")."""

from __future__ import annotations

import sys
import time

import typer
from rich.console import Console

from fleet_rlm.config import ConfigError, load_settings

EXIT_FAILED = 1
EXIT_CONFIG = 2

app = typer.Typer(help="The sandbox environment: the packages sandbox code can import.", no_args_is_help=True)


@app.command()
def build() -> None:
    """Build the sandbox environment (the lock plus sandbox_packages) if it is not built yet."""
    from fleet_rlm.clients.cli.preparing import prepare_backend
    from fleet_rlm.sandbox.base import SandboxUnavailable
    from fleet_rlm.sandbox.environment import built_environment
    from fleet_rlm.sandbox.local import LocalSandboxBackend
    from fleet_rlm.sandbox.registry import configured_backend

    try:
        backend = configured_backend(load_settings())
    except ConfigError as exc:
        print(f"fleet: error: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_CONFIG) from None
    local = backend if isinstance(backend, LocalSandboxBackend) else None
    was_built = local is not None and built_environment(local.environment) is not None
    started = time.monotonic()
    try:
        prepare_backend(backend, Console(highlight=False, stderr=True))
    except SandboxUnavailable as exc:
        print(f"fleet: error: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_FAILED) from None
    if local is None:
        print(f"sandbox backend {backend.name!r} is ready")
        return
    environment = local.sandbox_environment()
    state = "already built" if was_built else f"built in {time.monotonic() - started:.1f}s"
    print(f"sandbox environment {state}: {environment.directory}")
    print(environment.summary())
