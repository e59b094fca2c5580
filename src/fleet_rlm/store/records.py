"""Plain, immutable views of stored rows, handed out by :class:`fleet_rlm.store.Store`.

A record's fields are named like its table's columns, so one conversion serves every record
(:meth:`RowView.of`) and one builds a row's values back (:func:`row_values`); JSON containers are
copied, so a record never shares them with the session that read it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Self, cast

from fleet_rlm.config import Ceilings
from fleet_rlm.protocol.events import Event
from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.store.errors import Conflict, NotFound
from fleet_rlm.store.runners import is_dead
from fleet_rlm.store.tables import utcnow

MAX_INT32 = 2**31 - 1
"""The largest position, sequence number or offset the database holds (PostgreSQL's ``integer``; SQLite
would store more): the API and an archive's import refuse more, rather than failing or storing it."""


def _detached(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value


class RowView:
    @classmethod
    def of(cls, row: Any) -> Self:
        """The record of ``row`` (anything with the record's fields as attributes)."""
        values: dict[str, Any] = {}
        for item in dataclasses.fields(cast(Any, cls)):
            value = getattr(row, item.name)
            if value is None and item.default_factory is not dataclasses.MISSING:
                value = item.default_factory()
            values[item.name] = _detached(value)
        record: Self = cast(Any, cls)(**values)
        return record


def row_values(record: RowView, columns: set[str]) -> dict[str, Any]:
    """The record's fields that are among ``columns``, for building a row."""
    return {
        item.name: _detached(getattr(record, item.name))
        for item in dataclasses.fields(cast(Any, record))
        if item.name in columns
    }


@dataclass(frozen=True)
class SessionRecord(RowView):
    id: str
    name: str | None
    title: str | None
    mode: str | None
    settings: dict[str, Any]
    created_at: dt.datetime
    updated_at: dt.datetime


@dataclass(frozen=True)
class TurnRecord(RowView):
    id: str
    session_id: str
    position: int
    message: str
    status: TurnStatus
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
    evidence: list[str] = field(default_factory=list)
    """Lines printed by code that ran without error that support the answer (docs/events.md)."""
    idempotency_key: str | None = None
    runner: str | None = None
    program_version: str | None = None
    """The version of the program the turn ran; None before it started."""
    trace_id: str | None = None
    """The turn's trace id in the first tracing backend (OpenTelemetry: 32 hex digits; MLflow: ``tr-...``);
    None when it was not traced."""
    history: list[Any] | None = None
    """The conversation sent in place of the session's history (OpenAI-compatible calls); None: the session's."""
    cancel_requested: bool = False
    lease_expires_at: dt.datetime | None = None
    created_at: dt.datetime | None = None
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None

    @property
    def active(self) -> bool:
        return self.status.active

    @property
    def unverified(self) -> bool:
        return self.unverified_reason is not None


@dataclass(frozen=True)
class FileRecord(RowView):
    """A workspace file of a session. ``path`` is relative to the workspace (``files/x.csv``)."""

    path: str
    size: int
    sha256: str
    media_type: str
    origin: str
    turn_id: str | None = None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None


@dataclass(frozen=True)
class MemoryRecord(RowView):
    """A memory entry: ``pending`` review, ``approved`` (shown to later turns) or ``rejected``."""

    id: str
    text: str
    why: str
    status: str
    session_id: str | None = None
    """The session whose turn proposed it; None once that session is deleted."""
    turn_id: str | None = None
    created_at: dt.datetime | None = None
    reviewed_at: dt.datetime | None = None


@dataclass(frozen=True)
class FileChanges:
    """What a finished turn changes in its session's files, committed with the turn."""

    upserts: list[FileRecord] = field(default_factory=list)
    deletions: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class NewTurn:
    """A turn to queue in a session (by id or name), as :meth:`fleet_rlm.store.Store.create_turn` takes it.

    ``ceilings``, if given, are the server's ceilings the session's stored settings must still be
    within (a session stored before a ceiling was lowered, say), checked on the session as read in the
    transaction that would queue the turn: a session past one is that submission's answer alone
    (:class:`~fleet_rlm.store.errors.Invalid`, naming the setting), and nothing is queued for it.

    ``runner`` claims the turn for that runner as it is queued. With ``kernel_affinity`` only while no
    other live runner keeps the session's kernel (that of its last turn, if it ended other than
    interrupted), read in the same transaction; otherwise the turn is queued unclaimed instead."""

    session_ref: str
    message: str
    context_paths: Sequence[str] = ()
    options: dict[str, Any] | None = None
    idempotency_key: str | None = None
    runner: str | None = None
    lease_seconds: float | None = None
    history: list[tuple[str, str | None]] | None = None
    turn_id: str | None = None
    ceilings: Ceilings | None = None
    kernel_affinity: bool = False


@dataclass(frozen=True)
class Interrupting:
    """Which active turns :meth:`fleet_rlm.store.Store.interrupt_turns` ends ``interrupted``: those that
    meet every condition given.

    ``turn_ids``: only these. ``runner_gone_for``: only those whose runner is certainly gone, as judged
    from this runner (:func:`fleet_rlm.store.runners.is_dead`: a process on its host that is gone; a turn
    nobody claimed has no runner to be gone). ``lease_lapsed``: only those whose runner's lease lapsed. ``sparing``:
    never these (the turns the caller runs, whose leases it renews itself)."""

    turn_ids: Collection[str] | None = None
    runner_gone_for: str | None = None
    lease_lapsed: bool = False
    sparing: Collection[str] = ()

    def chooses(self, turn: TurnRecord) -> bool:
        if self.turn_ids is not None and turn.id not in self.turn_ids:
            return False
        if self.runner_gone_for is not None and not (
            turn.runner is not None and is_dead(turn.runner, self.runner_gone_for)
        ):
            return False
        if self.lease_lapsed and not (turn.lease_expires_at is not None and turn.lease_expires_at < utcnow()):
            return False
        return turn.id not in self.sparing


class Queued(NamedTuple):
    """A submission's answer: its turn, whether it is new (False: an earlier submission's, by its
    idempotency key), and the turn's session as read when it was queued."""

    turn: TurnRecord
    created: bool
    session: SessionRecord


class Claimed(NamedTuple):
    """A turn claimed for a runner, with its session as read in the claim's transaction."""

    turn: TurnRecord
    session: SessionRecord


@dataclass(frozen=True)
class TurnStart:
    """A queued turn about to run, marked ``running`` with the version of the program that serves then;
    ``events`` (its ``turn.started``) are stored with the change, and only if it is made."""

    turn_id: str
    events: Sequence[Event] = ()


@dataclass(frozen=True)
class TurnEnd:
    """How a turn ended, committed at once by :meth:`fleet_rlm.store.Store.finish_turn`: its final status,
    answer, usage, artifacts, its last events (the terminal one among them) and its file changes."""

    turn_id: str
    status: TurnStatus
    answer: str | None = None
    answer_source: str | None = None
    unverified_reason: str | None = None
    error: str | None = None
    usage: dict[str, Any] | None = None
    artifacts: list[dict[str, Any]] | None = None
    evidence: list[str] | None = None
    events: Sequence[Event] = ()
    files: FileChanges | None = None


@dataclass(frozen=True)
class LeaseRenewal:
    """What renewing a runner's leases found: the turns a cancel was asked for, and those it no longer
    holds (they ended meanwhile; another process ends a turn whose lease lapsed)."""

    cancelled: set[str] = field(default_factory=set)
    lost: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class TurnCommit:
    """What :meth:`fleet_rlm.store.Store.commit_turns` did: the turns it marked running (the others of its
    starts were no longer queued), and each end's turn as ended or the error that left it alone."""

    started: set[str]
    ended: list[TurnRecord | Conflict | NotFound]
    program: ProgramRecord | None = None
    """The program the started turns run (read in the same transaction); None: the built-in one."""
    refused: set[str] = field(default_factory=set)
    """The turns of the events it was given that are no longer active: their events were not stored."""


@dataclass(frozen=True)
class ReplayRecord(RowView):
    """The snapshot of a turn's inputs taken when it ran with ``capture_replays`` on."""

    turn_id: str
    session_id: str
    snapshot: dict[str, Any]
    created_at: dt.datetime | None = None


@dataclass(frozen=True)
class LabelRecord(RowView):
    """An approved gold label of a captured turn (docs/evaluation.md)."""

    id: str
    turn_id: str
    session_id: str
    answer: str
    group: str
    value: Any = None
    expectations: dict[str, Any] = field(default_factory=dict)
    critical: bool = False
    benchmark: bool = False
    created_at: dt.datetime | None = None


@dataclass(frozen=True)
class ProgramRecord(RowView):
    """An optimized program: ``candidate``, ``approved`` (the newest approved one serves) or ``retired``."""

    version: str
    status: str
    content: str
    sha256: str
    report: dict[str, Any] = field(default_factory=dict)
    created_at: dt.datetime | None = None
    approved_at: dt.datetime | None = None
    retired_at: dt.datetime | None = None
