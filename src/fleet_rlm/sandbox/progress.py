"""Progress of a slow preparation (building the sandbox environment), for a progress bar or a log."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class BuildProgress:
    """One step: what happens now, and how far along it is (``done`` of ``total`` units)."""

    message: str
    done: int
    total: int


Progress = Callable[[BuildProgress], None]


def quiet(_: BuildProgress) -> None:
    return None
