"""The relational schema: sessions, turns, their append-only events, session files, memory, and the
evaluation data (replay snapshots of turns, labels).

File bytes live on disk (see :mod:`fleet_rlm.store.blobs`), and with ``worker.file_store = "database"``
in the database as well (``blob_chunks``, see :mod:`fleet_rlm.store.shared_blobs`); rows hold their
metadata. Timestamps are timezone-aware UTC on every backend. Changing a table means adding an Alembic revision under
``migrations/versions`` (a test compares the migrated schema with this module).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from fleet_rlm.protocol.status import ACTIVE_STATUSES, TurnStatus

FILE_ORIGINS = ("upload", "artifact", "memory")
MEMORY_STATUSES = ("pending", "approved", "rejected")

JsonType = JSON().with_variant(JSONB(), "postgresql")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A datetime stored as UTC and always read back timezone-aware (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(dt.UTC)

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


class TurnStatusType(TypeDecorator[TurnStatus]):
    """A turn status stored as its text and read back as a :class:`TurnStatus` (an unknown one is refused)."""

    impl = String(16)
    cache_ok = True

    def process_bind_param(self, value: TurnStatus | str | None, dialect: Dialect) -> str | None:
        return None if value is None else TurnStatus(value).value

    def process_result_value(self, value: str | None, dialect: Dialect) -> TurnStatus | None:
        return None if value is None else TurnStatus(value)


UNCLAIMED_SQL = text("status = 'queued' AND runner IS NULL")
ACTIVE_SQL = text("status IN ({})".format(", ".join(f"'{status}'" for status in ACTIVE_STATUSES)))

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class SessionRow(Base):
    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(64), unique=True)
    title: Mapped[str | None] = mapped_column(String(200))
    mode: Mapped[str | None] = mapped_column(String(16))
    settings: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    kernel_reset_after: Mapped[int | None] = mapped_column(Integer)
    """A kernel restart asked of any process: the session's kernels and kernel state as of its turns up
    to this position are void (None: never restarted)."""


class TurnRow(Base):
    __tablename__ = "turns"
    __table_args__ = (
        UniqueConstraint("session_id", "position"),
        UniqueConstraint("session_id", "idempotency_key"),
        # At most one queued or running turn per session, enforced by the database itself.
        Index(
            "ix_turns_one_active_per_session",
            "session_id",
            unique=True,
            sqlite_where=ACTIVE_SQL,
            postgresql_where=ACTIVE_SQL,
        ),
        Index("ix_turns_status", "status"),
        # The queue workers claim from, oldest first (docs/deploy.md).
        Index("ix_turns_queued_unclaimed", "created_at", sqlite_where=UNCLAIMED_SQL, postgresql_where=UNCLAIMED_SQL),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    message: Mapped[str] = mapped_column(Text)
    context_paths: Mapped[list[str]] = mapped_column(JsonType, default=list)
    options: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    status: Mapped[TurnStatus] = mapped_column(TurnStatusType())
    answer: Mapped[str | None] = mapped_column(Text)
    answer_source: Mapped[str | None] = mapped_column(String(16))
    unverified_reason: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    usage: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)
    artifacts: Mapped[list[dict[str, Any]]] = mapped_column(JsonType, default=list)
    evidence: Mapped[list[str] | None] = mapped_column(JsonType)
    """Lines of output of code that ran without error that support the answer; None: a turn stored before."""
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    runner: Mapped[str | None] = mapped_column(String(200))
    program_version: Mapped[str | None] = mapped_column(String(40))
    """The version of the program the turn ran (``builtin``, or an approved optimization's)."""
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    """Until when the runner's claim holds; it renews it while it runs the turn, and a turn whose lease
    lapsed is ended ``interrupted`` by any Fleet process (its runner died)."""
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """A cancel asked for in a process other than the turn's runner, which acts on it."""
    history: Mapped[list[Any] | None] = mapped_column(JsonType)
    """The conversation an OpenAI-compatible call sent, as (message, answer) pairs, in place of the
    session's own turns; None: the session's history."""
    trace_id: Mapped[str | None] = mapped_column(String(64))
    """The turn's trace id in the first tracing backend (OpenTelemetry: 32 hex digits; MLflow: tr-...)."""
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())


class EventRow(Base):
    """One event of a turn, append-only; ``(turn_id, seq)`` is its identity."""

    __tablename__ = "events"

    turn_id: Mapped[str] = mapped_column(ForeignKey("turns.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    type: Mapped[str] = mapped_column(String(40))
    ts: Mapped[float] = mapped_column(Float)
    span_id: Mapped[str] = mapped_column(String(64))
    parent_span_id: Mapped[str | None] = mapped_column(String(64))
    # Plain JSON (not JSONB) keeps the text as written, so a replay is byte-identical to the live stream.
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class FileRow(Base):
    """A file of a session's workspace: an upload in ``files/``, an artifact, or a memory file."""

    __tablename__ = "files"

    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True)
    path: Mapped[str] = mapped_column(String(1024), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    media_type: Mapped[str] = mapped_column(String(200))
    origin: Mapped[str] = mapped_column(String(16))
    turn_id: Mapped[str | None] = mapped_column(String(40))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class MemoryRow(Base):
    """One entry of the reviewed memory every session's turns share: proposed by a turn (``pending``),
    then ``approved`` (shown to later turns) or ``rejected`` by the person. ``session_id`` and
    ``turn_id`` say where it came from; they become null when that session is deleted."""

    __tablename__ = "memories"
    __table_args__ = (Index("ix_memories_status", "status"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    text: Mapped[str] = mapped_column(Text)
    why: Mapped[str] = mapped_column(Text, default="")
    status: Mapped[str] = mapped_column(String(16))
    session_id: Mapped[str | None] = mapped_column(ForeignKey("sessions.id", ondelete="SET NULL"))
    turn_id: Mapped[str | None] = mapped_column(ForeignKey("turns.id", ondelete="SET NULL"))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    reviewed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())


class BlobChunkRow(Base):
    """One chunk of a session's file bytes shared through the database (``worker.file_store =
    "database"``): a blob's chunks are written in one transaction, ``seq`` 0 first (an empty blob has
    one empty chunk). Not tied to the sessions table: an import stores its bytes before its session."""

    __tablename__ = "blob_chunks"

    session_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ReplayRow(Base):
    """The immutable snapshot of one turn's inputs, kept when ``capture_replays`` was on for it: what a
    replay needs to run the turn again in a fresh runtime. Written once, never updated."""

    __tablename__ = "turn_replays"

    turn_id: Mapped[str] = mapped_column(ForeignKey("turns.id", ondelete="CASCADE"), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"), index=True)
    snapshot: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class LabelRow(Base):
    """A maintainer's approved gold label of a captured turn: the reviewed answer and what a replay's
    answer must satisfy (docs/evaluation.md)."""

    __tablename__ = "eval_labels"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    turn_id: Mapped[str] = mapped_column(ForeignKey("turns.id", ondelete="CASCADE"), unique=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"), index=True)
    answer: Mapped[str] = mapped_column(Text)
    value: Mapped[Any] = mapped_column(JSON, nullable=True)
    expectations: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    group: Mapped[str] = mapped_column(String(64))
    critical: Mapped[bool] = mapped_column(Boolean, default=False)
    benchmark: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ProgramRow(Base):
    """A program an optimization run produced: a ``candidate`` (inactive) until approved, then
    ``approved`` (the newest approved one serves), ``retired`` once rolled back. ``content`` is the
    program's canonical JSON, whose sha256 the run's report recorded."""

    __tablename__ = "programs"

    version: Mapped[str] = mapped_column(String(40), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    report: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    approved_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    retired_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())


EVENTS = cast(Table, EventRow.__table__)
"""The events table, for Core statements (:meth:`fleet_rlm.store.Database.write_connection`)."""
TURNS = cast(Table, TurnRow.__table__)
"""The turns table, for Core statements."""
