"""Files in and out of a sandbox workspace that is a host directory (the ``local`` backend's).

The workspace is sandbox-writable, so both directions go through
:class:`~fleet_rlm.workspace.tree.SafeTree`: a push is written beside its target and renamed into
place (a link or FIFO planted there is replaced, never written through; a link on the way fails),
and a pull opens only a regular file reached without links (a FIFO cannot block it), refuses a
sparse one and stops at its bound through the open descriptor (``OverBound``), however the file
grows meanwhile. What the host
writes gets the shared modes every sandbox uid of the workspace may change (docs/security.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fleet_rlm.workspace.tree import SHARED_DIR_MODE, SHARED_FILE_MODE, Readable, SafeTree

__all__ = ["HostDirectoryFiles", "Readable"]
_CHUNK = 1 << 20


@dataclass(frozen=True)
class HostDirectoryFiles:
    """:class:`~fleet_rlm.sandbox.base.WorkspaceFiles` for a workspace at ``root`` on this host."""

    root: Path
    file_mode: int = SHARED_FILE_MODE
    dir_mode: int = SHARED_DIR_MODE

    def push(self, source: Path | Readable, sandbox_rel: str) -> int:
        tree = SafeTree(self.root)
        if isinstance(source, Path):
            with source.open("rb") as handle:
                return tree.write(sandbox_rel, handle, mode=self.file_mode, dir_mode=self.dir_mode)
        return tree.write(sandbox_rel, source, mode=self.file_mode, dir_mode=self.dir_mode)

    def pull(self, sandbox_rel: str, destination: Path, *, limit: int) -> int:
        with SafeTree(self.root).open_bounded(sandbox_rel, limit) as handle:
            return _write_whole(destination, handle)


def _write_whole(destination: Path, source: Readable) -> int:
    """``source`` into a new file beside ``destination``, renamed over it once complete."""
    fd, name = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(source, out, _CHUNK)
            size = out.tell()
        os.replace(name, destination)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    return size
