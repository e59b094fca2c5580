"""What ``fleet run`` exits with, for scripts: documented in the README and docs/cli.md."""

from __future__ import annotations

import sys

import typer

from fleet_rlm.protocol.status import TurnStatus

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_UNVERIFIED = 3
"""The turn completed, but its answer was extracted when the budget ran out: not checked by code."""
EXIT_INCOMPLETE = 4
"""The turn could not compute a result (every execution failed, or it looped on one failure)."""
EXIT_CANCELLED = 130


def exit_code_for(status: TurnStatus, *, unverified: bool = False, reason: str | None = None) -> int:
    """The exit code of a finished turn; prints the one-line reason on stderr when it is not 0."""
    if status is TurnStatus.COMPLETED and not unverified:
        return EXIT_OK
    if status is TurnStatus.COMPLETED:
        print(f"fleet: unverified: {reason}", file=sys.stderr)
        return EXIT_UNVERIFIED
    print(f"fleet: {status}: {reason}", file=sys.stderr)
    if status is TurnStatus.INCOMPLETE:
        return EXIT_INCOMPLETE
    return EXIT_CANCELLED if status is TurnStatus.CANCELLED else EXIT_FAILED


def fail(message: str, code: int = EXIT_FAILED) -> typer.Exit:
    """Print ``message`` as the command's error and return the exit to raise with ``code``."""
    print(f"fleet: error: {message}", file=sys.stderr)
    return typer.Exit(code)
