"""Plain, immutable views of stored rows, handed out by :class:`fleet_rlm.store.Store`."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from fleet_rlm.store.tables import ACTIVE_TURN_STATUSES, FileRow, SessionRow, TurnRow


@dataclass(frozen=True)
class SessionRecord:
    id: str
    name: str | None
    title: str | None
    mode: str | None
    settings: dict[str, Any]
    created_at: dt.datetime
    updated_at: dt.datetime

    @classmethod
    def of(cls, row: SessionRow) -> SessionRecord:
        return cls(
            id=row.id,
            name=row.name,
            title=row.title,
            mode=row.mode,
            settings=dict(row.settings or {}),
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


@dataclass(frozen=True)
class TurnRecord:
    id: str
    session_id: str
    position: int
    message: str
    status: str
    context_paths: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    answer: str | None = None
    answer_source: str | None = None
    """submitted, extracted, direct or module; None without an answer."""
    unverified_reason: str | None = None
    """Why the answer was not checked by running code (it was extracted), if it was not."""
    error: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    idempotency_key: str | None = None
    runner: str | None = None
    created_at: dt.datetime | None = None
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_TURN_STATUSES

    @classmethod
    def of(cls, row: TurnRow) -> TurnRecord:
        return cls(
            id=row.id,
            session_id=row.session_id,
            position=row.position,
            message=row.message,
            status=row.status,
            context_paths=list(row.context_paths or []),
            options=dict(row.options or {}),
            answer=row.answer,
            answer_source=row.answer_source,
            unverified_reason=row.unverified_reason,
            error=row.error,
            usage=dict(row.usage or {}),
            artifacts=list(row.artifacts or []),
            idempotency_key=row.idempotency_key,
            runner=row.runner,
            created_at=row.created_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
        )


@dataclass(frozen=True)
class FileRecord:
    """A workspace file of a session. ``path`` is relative to the workspace (``files/x.csv``)."""

    path: str
    size: int
    sha256: str
    media_type: str
    origin: str
    turn_id: str | None = None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None

    @classmethod
    def of(cls, row: FileRow) -> FileRecord:
        return cls(
            path=row.path,
            size=row.size,
            sha256=row.sha256,
            media_type=row.media_type,
            origin=row.origin,
            turn_id=row.turn_id,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


@dataclass(frozen=True)
class FileChanges:
    """What a finished turn changes in its session's files, committed with the turn."""

    upserts: list[FileRecord] = field(default_factory=list)
    deletions: list[str] = field(default_factory=list)
