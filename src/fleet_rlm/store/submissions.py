"""Queueing several turns in one transaction, each answered as if it had been queued alone.

Fifty people submitting at the same moment made fifty transactions of seven statements each, one
after the other on SQLite's single writer (~25 ms each under load): the last submission waited more
than a second, and every event and turn start queued behind them. Together, the whole batch reads its
sessions, their active turns, their turns of the idempotency keys given and their last positions with
three statements, inserts every new turn with one and touches every session with one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from fleet_rlm.protocol.events import new_id
from fleet_rlm.protocol.status import ACTIVE_STATUSES, TurnStatus
from fleet_rlm.store.errors import Conflict, Invalid, NotFound
from fleet_rlm.store.leases import kernel_kept_by, lease_end
from fleet_rlm.store.records import NewTurn, Queued, SessionRecord, TurnRecord
from fleet_rlm.store.runners import kernel_free
from fleet_rlm.store.session_settings import check_session_settings
from fleet_rlm.store.tables import SessionRow, TurnRow, utcnow

Created = Queued | Exception
"""A submission's answer: its turn, whether it is new and its session, or the error it raised (a
:class:`StoreError` when it was refused)."""


def new_turn_row(new: NewTurn, session_id: str, position: int, runner: str | None) -> TurnRow:
    return TurnRow(
        id=new.turn_id or new_id("turn"),
        session_id=session_id,
        position=position,
        message=new.message,
        context_paths=list(new.context_paths),
        options=dict(new.options or {}),
        status=TurnStatus.QUEUED,
        usage={},
        artifacts=[],
        idempotency_key=new.idempotency_key,
        runner=runner,
        lease_expires_at=lease_end(new.lease_seconds) if runner and new.lease_seconds else None,
        history=[list(pair) for pair in new.history] if new.history is not None else None,
    )


def reused_key(new: NewTurn, existing: TurnRow) -> Invalid | None:
    """The error when ``existing``, the turn of ``new``'s idempotency key, is not the same request."""
    if existing.message != new.message or list(existing.context_paths) != list(new.context_paths):
        return Invalid(
            f"idempotency key {new.idempotency_key!r} was already used for a different turn",
            code="idempotency_key_reused",
        )
    return None


def in_progress(active: TurnRow, session_ref: str) -> Conflict:
    return Conflict(f"turn {active.id} is still {active.status} in session {session_ref!r}", code="turn_in_progress")


@dataclass
class _Batch:
    sessions: dict[str, SessionRow]
    """By id and by name."""
    active: dict[str, TurnRow]
    keyed: dict[tuple[str, str], TurnRow]
    last: dict[str, int]
    kernel_holders: dict[str, str]
    """Who likely keeps each session's kernel (:func:`kernel_kept_by` of its last turn); consulted only
    for a session with no active turn, the one case a turn is queued in."""


async def _read(session: AsyncSession, news: Sequence[NewTurn]) -> _Batch:
    refs = {new.session_ref for new in news}
    rows = (
        await session.execute(select(SessionRow).where(or_(SessionRow.id.in_(refs), SessionRow.name.in_(refs))))
    ).scalars()
    sessions: dict[str, SessionRow] = {}
    for row in rows:
        sessions[row.id] = row
        if row.name is not None:
            sessions.setdefault(row.name, row)  # an id wins over another session's name
    ids = {row.id for row in sessions.values()}
    if not ids:
        return _Batch(sessions, {}, {}, {}, {})
    keys = {new.idempotency_key for new in news if new.idempotency_key is not None}
    wanted: ColumnElement[bool] = TurnRow.status.in_(ACTIVE_STATUSES)
    if keys:
        wanted = or_(wanted, TurnRow.idempotency_key.in_(keys))
    turns = (await session.execute(select(TurnRow).where(TurnRow.session_id.in_(ids), wanted))).scalars().all()
    positions = (
        select(TurnRow.session_id, func.max(TurnRow.position).label("position"))
        .where(TurnRow.session_id.in_(ids))
        .group_by(TurnRow.session_id)
        .subquery()
    )
    last_turns = (
        await session.execute(
            select(TurnRow.session_id, TurnRow.position, TurnRow.runner, TurnRow.status).join(
                positions,
                and_(TurnRow.session_id == positions.c.session_id, TurnRow.position == positions.c.position),
            )
        )
    ).all()
    return _Batch(
        sessions,
        {turn.session_id: turn for turn in turns if turn.status in ACTIVE_STATUSES},
        {(turn.session_id, turn.idempotency_key): turn for turn in turns if turn.idempotency_key is not None},
        {last.session_id: last.position for last in last_turns},
        {last.session_id: holder for last in last_turns if (holder := kernel_kept_by(last.runner, last.status))},
    )


async def create_together(session: AsyncSession, news: Sequence[NewTurn]) -> tuple[list[Created], list[TurnRow]]:
    """Queue ``news`` in ``session``'s transaction, in order (a later submission to the same session
    finds the earlier one in progress); returns each one's answer and the rows it added."""
    batch = await _read(session, news)
    answers: list[Exception | tuple[TurnRow, bool, SessionRow]] = []
    added: list[TurnRow] = []
    for new in news:
        sess = batch.sessions.get(new.session_ref)
        if sess is None:
            answers.append(NotFound("session", new.session_ref))
            continue
        if new.ceilings is not None:
            try:
                check_session_settings(sess.settings, new.ceilings)
            except Invalid as refused:  # its submission's answer alone
                answers.append(Invalid(f"this session's {refused.message}; change it with PATCH", code=refused.code))
                continue
        if new.idempotency_key is not None and (prior := batch.keyed.get((sess.id, new.idempotency_key))):
            answers.append(reused_key(new, prior) or (prior, False, sess))
            continue
        if (active := batch.active.get(sess.id)) is not None:
            answers.append(in_progress(active, new.session_ref))
            continue
        position = batch.last.get(sess.id, 0) + 1
        runner = new.runner
        if runner is not None and new.kernel_affinity and not kernel_free(batch.kernel_holders.get(sess.id), runner):
            runner = None  # queued for whoever claims it: the process keeping the session's kernel, first
        row = new_turn_row(new, sess.id, position, runner)
        session.add(row)
        sess.updated_at = utcnow()
        batch.last[sess.id] = position
        batch.active[sess.id] = row
        if new.idempotency_key is not None:
            batch.keyed[(sess.id, new.idempotency_key)] = row
        added.append(row)
        answers.append((row, True, sess))
    await session.flush()
    return [
        answer
        if isinstance(answer, Exception)
        else Queued(TurnRecord.of(answer[0]), answer[1], SessionRecord.of(answer[2]))
        for answer in answers
    ], added
