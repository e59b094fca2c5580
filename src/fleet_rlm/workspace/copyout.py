"""How many bytes the host may still copy out of a sandbox's workspace, under every bound at once.

Sandbox code chooses what the host copies out (artifacts, ``fleet run``'s results), and a file can
cost the sandbox far less than it costs the host: a sparse file, or many files under a volume's
bound that is larger than what the host wants to keep. So each copy is bounded by the bytes left
under the tightest bound (the turn's, the session's) and read through its open descriptor
(:meth:`~fleet_rlm.workspace.tree.SafeTree.open_bounded`); a file over it is skipped, and the
reason is kept for the person, naming the file and the bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from fleet_rlm.workspace.tree import OverBound, SafeTree

MIB = 1024 * 1024
Copied = TypeVar("Copied")


def copyable(tree: SafeTree, rel: str, limit: int) -> bool:
    """Whether ``rel`` would be copied out on its own bound (a regular file, not sparse, at most ``limit``
    bytes), checked without reading it: an artifact is announced only then."""
    try:
        with tree.open_bounded(rel, limit):
            return True
    except OSError:  # OverBound, or no longer a regular file reached without links
        return False


@dataclass
class Bound:
    """One bound on copied-out bytes: what it is called (for messages) and the bytes it allows."""

    name: str
    """e.g. "the turn's bound of 2048 MiB (sandbox.copy_out_turn_mb)"."""
    limit: int
    used: int = 0

    @property
    def left(self) -> int:
        return max(0, self.limit - self.used)


def mib_bound(what: str, setting: str, mib: int, used: int = 0) -> Bound:
    return Bound(f"{what} bound of {mib} MiB ({setting})", mib * MIB, used)


@dataclass
class CopyBudget:
    """The bounds a run of copies shares; :attr:`refused` says what was skipped and why."""

    bounds: list[Bound]
    refused: dict[str, str] = field(default_factory=dict)
    """Path -> the warning for a file that was not copied out."""

    def left(self) -> int:
        return min(bound.left for bound in self.bounds)

    def copy(self, rel: str, copy: Callable[[int], Copied], size_of: Callable[[Copied], int]) -> Copied | None:
        """Run ``copy`` with the bytes left (it raises :class:`OverBound` past them, having written
        nothing) and count the ``size_of`` what it returns; None when the file was refused (and
        :attr:`refused` says why)."""
        tightest = min(self.bounds, key=lambda bound: bound.left)
        try:
            copied = copy(tightest.left)
        except OverBound as exc:
            if not exc.past_limit:  # sparse, or grown while it was copied
                self.refused[rel] = f"{rel} was not copied out of the sandbox: {exc.why}"
            else:
                self.refused[rel] = (
                    f"{rel} was not copied out of the sandbox: it is larger than the {tightest.left} bytes left "
                    f"under {tightest.name}"
                )
            return None
        for bound in self.bounds:
            bound.used += size_of(copied)
        return copied
