"""Copying a workspace into a sandbox's volume and what the turn left there back out.

Both directions go through :class:`~fleet_rlm.workspace.tree.SafeTree`: only regular files are
copied, links and special files are skipped (and remembered by the source tree), and nothing is
written through a link. ``tmp/`` never travels. What comes back is bounded
(:mod:`fleet_rlm.workspace.copyout`): a sparse file, or one past the bytes left, stays behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from fleet_rlm.workspace.copyout import CopyBudget
from fleet_rlm.workspace.layout import NOT_LISTED
from fleet_rlm.workspace.tree import SHARED_FILE_MODE, SafeTree, Skipped, UnsafeEntry

Facts = tuple[int, int]
"""(size, mtime_ns) of a copied file."""


@dataclass
class Mirror:
    """A copy of ``home`` in ``live`` that can be brought back once the sandboxes are gone."""

    home: SafeTree
    live: SafeTree
    copied: dict[str, Facts] = field(default_factory=dict)
    """What was copied in, as it stood in ``live`` right after the copy."""

    def copy_in(self) -> None:
        for entry in self.home.walk(skip_top=NOT_LISTED):
            try:
                self.live.copy_from(self.home, entry.rel, entry.rel, mode=SHARED_FILE_MODE)
            except UnsafeEntry as exc:  # replaced by a link or a special file since it was listed
                self.home.skipped.append(Skipped(exc.rel, exc.what))
                continue
            copied = self.live.entry(entry.rel)
            if copied is not None:
                self.copied[entry.rel] = (copied.size, copied.mtime_ns)

    def copy_back(self, budget: CopyBudget, *, mode: int = 0o644, dir_mode: int = 0o755) -> list[str]:
        """Bring new and changed files home, within ``budget`` (what is refused is in its
        :attr:`~CopyBudget.refused`), and remove there what the turn deleted; returns the paths
        written. Call it only once no sandbox runs on ``live``."""
        written: list[str] = []
        seen: set[str] = set()
        for entry in self.live.walk(skip_top=NOT_LISTED):
            seen.add(entry.rel)
            if self.copied.get(entry.rel) == (entry.size, entry.mtime_ns):
                continue
            try:
                copied = budget.copy(entry.rel, partial(self._bring, entry.rel, mode, dir_mode), int)
            except (UnsafeEntry, IsADirectoryError):
                continue
            if copied is not None:
                written.append(entry.rel)
        for rel in self.copied:
            if rel not in seen:
                self.home.remove(rel)
        return written

    def _bring(self, rel: str, mode: int, dir_mode: int, limit: int) -> int:
        with self.live.open_bounded(rel, limit) as handle:
            return self.home.write(rel, handle, mode=mode, dir_mode=dir_mode)
