"""A copy of an embedded SQLite database, taken before a migration changes its schema.

The copy is made with SQLite's online backup API, so it is a consistent snapshot (what the WAL holds
included) even while other processes read the file. It sits next to the database and its name says
which revision it holds and when it was taken: ``fleet-backup-0001-20260103T120000Z.db`` beside
``fleet.db``. Restoring is replacing the database file with it while no Fleet process runs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from pathlib import Path

BACKUP_MARK = "-backup-"


def backup_path(database: Path, revision: str, taken_at: dt.datetime) -> Path:
    """Where the backup of ``database`` at ``revision`` taken at ``taken_at`` goes (a free name)."""
    stamp = taken_at.astimezone(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    stem = f"{database.stem}{BACKUP_MARK}{revision}-{stamp}"
    candidate = database.with_name(f"{stem}{database.suffix}")
    number = 1
    while candidate.exists():
        number += 1
        candidate = database.with_name(f"{stem}-{number}{database.suffix}")
    return candidate


def back_up(database: Path, revision: str) -> Path:
    """Copy ``database`` (at schema ``revision``) next to itself; returns the copy's path.

    Written under a temporary name and renamed when complete, so a crash never leaves a partial
    file under a backup's name.
    """
    destination = backup_path(database, revision, dt.datetime.now(dt.UTC))
    partial = destination.with_name(destination.name + ".partial")
    source = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        target = sqlite3.connect(partial)
        try:
            source.backup(target)
        finally:
            target.close()
        partial.replace(destination)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise
    finally:
        source.close()
    return destination
