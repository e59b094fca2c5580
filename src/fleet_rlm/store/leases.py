"""The turn queue: workers claim queued turns under leases and renew them while they run them; any
process ends a turn whose lease lapsed (docs/deploy.md).

PostgreSQL's ``FOR UPDATE SKIP LOCKED`` lets any number of workers claim at once without waiting on
each other or claiming one turn twice; on SQLite every write transaction holds the database's one
write lock, which serializes claims as well. At most one turn per session is queued or running (a
unique index), so claiming the oldest queued turn first keeps each session's turns in order.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import exists, func, or_, select, update
from sqlalchemy.orm import aliased

from fleet_rlm.protocol.status import ACTIVE_STATUSES, TurnStatus
from fleet_rlm.store.base import StoreBase, id_chunks
from fleet_rlm.store.errors import Conflict, NotFound
from fleet_rlm.store.notify import Channel, notify
from fleet_rlm.store.records import Claimed, LeaseRenewal, SessionRecord, TurnRecord
from fleet_rlm.store.tables import TURNS, SessionRow, TurnRow, utcnow


def lease_end(seconds: float) -> dt.datetime:
    return utcnow() + dt.timedelta(seconds=seconds)


def kernel_kept_by(runner: str | None, status: TurnStatus) -> str | None:
    """The runner likely keeping a session's kernel, from its last ended turn's runner and status: the
    one that ran it, unless it ended interrupted (:func:`held_elsewhere` is the same rule in SQL)."""
    return None if status is TurnStatus.INTERRUPTED else runner


_PREVIOUS = aliased(TurnRow, name="previous")
"""The turn before, in :func:`held_elsewhere` (made once: making an alias cost 5% of a busy PostgreSQL
server's event loop, in every claim)."""


def held_elsewhere(runner: str) -> Any:
    """Whether the previous turn of a turn's session ran on a runner other than ``runner`` and ended
    other than interrupted (a condition on ``TurnRow``)."""
    previous = _PREVIOUS
    return exists().where(
        previous.session_id == TurnRow.session_id,
        previous.position == TurnRow.position - 1,
        previous.runner.is_not(None),
        previous.runner != runner,
        previous.status != TurnStatus.INTERRUPTED,
    )


RESET_ATTEMPTS = 3


class _TurnArrived(Exception):
    """A turn of the session was submitted while its kernel was being reset (the reset is rolled back)."""


class LeaseQueries(StoreBase):
    async def claim_turn(
        self, runner: str, lease_seconds: float, *, turn_id: str | None = None, affinity_seconds: float = 0.0
    ) -> TurnRecord | None:
        """Claim the oldest queued turn no process has claimed (or the turn ``turn_id``, if it is such a
        turn) for ``runner``; None when there is none. See :meth:`claim_turns`."""
        only = None if turn_id is None else [turn_id]
        claimed = await self.claim_turns(
            runner, lease_seconds, limit=1, turn_ids=only, affinity_seconds=affinity_seconds
        )
        return claimed[0].turn if claimed else None

    async def claim_turns(
        self,
        runner: str,
        lease_seconds: float,
        *,
        limit: int,
        turn_ids: Collection[str] | None = None,
        affinity_seconds: float = 0.0,
    ) -> list[Claimed]:
        """Claim up to ``limit`` of the oldest queued turns no process has claimed (only among
        ``turn_ids``, if given) for ``runner``, oldest first, with their sessions, in one transaction: a worker with room
        for 30 turns takes them in one round of statements, not 30.

        With ``affinity_seconds``, a turn whose session's previous turn another runner ran (and did not
        leave interrupted: that runner likely holds the session's kernel) is left to that runner for
        that long after it was queued; then anyone may claim it."""
        if limit < 1 or (turn_ids is not None and not turn_ids):
            return []
        unclaimed = [TurnRow.status == TurnStatus.QUEUED, TurnRow.runner.is_(None)]
        if turn_ids is not None:
            unclaimed.append(TurnRow.id.in_(list(turn_ids)))
        if affinity_seconds > 0:
            waited = TurnRow.created_at <= utcnow() - dt.timedelta(seconds=affinity_seconds)
            unclaimed.append(or_(waited, ~held_elsewhere(runner)))
        # An idle worker asks every second: a read finds nothing to claim without taking a write lock
        # (SQLite's one) or a transaction that locks rows.
        async with self.db.read() as session:
            if (await session.execute(select(TurnRow.id).where(*unclaimed).limit(1))).first() is None:
                return []
        query = (
            select(TurnRow)
            .where(*unclaimed)
            .order_by(TurnRow.created_at, TurnRow.id)
            .limit(limit)
            .with_for_update(skip_locked=True, key_share=True)
        )
        async with self.db.write() as session:
            rows = list((await session.execute(query)).scalars())
            if not rows:
                return []
            lease = lease_end(lease_seconds)
            for row in rows:
                row.runner = runner
                row.lease_expires_at = lease
            wanted = select(SessionRow).where(SessionRow.id.in_({row.session_id for row in rows}))
            sessions = {found.id: SessionRecord.of(found) for found in (await session.execute(wanted)).scalars()}
            return [Claimed(TurnRecord.of(row), sessions[row.session_id]) for row in rows]

    async def still_queued(self, turn_ids: Sequence[str]) -> set[str]:
        """Those of ``turn_ids`` still queued (claimed or not), read by id in chunks (filtered here:
        with ``status`` in the query SQLite would scan every queued turn through its status index)."""
        queued: set[str] = set()
        async with self.db.read_connection() as connection:
            for chunk in id_chunks(turn_ids):
                query = select(TURNS.c.id, TURNS.c.status).where(TURNS.c.id.in_(chunk))
                queued.update(row.id for row in await connection.execute(query) if row.status is TurnStatus.QUEUED)
        return queued

    async def unclaim_turns(self, runner: str, turn_ids: Collection[str]) -> None:
        """Give back ``runner``'s claims on those of ``turn_ids`` it has not started (still queued), and
        tell the other workers they wait."""
        if not turn_ids:
            return
        async with self.db.write() as session:
            given_back = await session.execute(
                update(TurnRow)
                .where(TurnRow.id.in_(list(turn_ids)), TurnRow.runner == runner, TurnRow.status == TurnStatus.QUEUED)
                .values(runner=None, lease_expires_at=None)
                .returning(TurnRow.id)
            )
            await notify(self.db, session, Channel.QUEUED, list(given_back.scalars()))

    async def kernel_holder(self, session_ref: str) -> str | None:
        """The runner that ran the last ended turn of the session ``session_ref`` (its id or name) names,
        unless that turn ended interrupted (its runner likely keeps the session's kernel); None: no such
        runner (or no such session)."""
        query = (
            select(TurnRow.runner, TurnRow.status)
            .join(SessionRow, SessionRow.id == TurnRow.session_id)
            .where(
                or_(SessionRow.id == session_ref, SessionRow.name == session_ref),  # a name is never an id
                TurnRow.status.not_in(ACTIVE_STATUSES),
            )
            .order_by(TurnRow.position.desc())
            .limit(1)
        )
        async with self.db.read() as session:
            last = (await session.execute(query)).first()
        return None if last is None else kernel_kept_by(last.runner, last.status)

    async def reset_kernel(self, session_id: str) -> None:
        """Void the session's kernel and kernel state as of its turns so far, in whichever process keeps
        them (it ends them before the session's next turn there). Conflict ``kernel_busy`` while a turn
        of the session runs.

        The session's queued turn is locked as starting it locks it, so it either started first
        (Conflict) or reads the reset when it starts. A turn submitted meanwhile holds the session's row,
        which the reset then waits for: if one did, the reset is made again, with it locked too."""
        for _ in range(RESET_ATTEMPTS):
            try:
                await self._reset_kernel_once(session_id)
                return
            except _TurnArrived:
                continue
        raise Conflict("turns of this session keep arriving; try again", code="kernel_busy")

    async def _reset_kernel_once(self, session_id: str) -> None:
        async with self.db.write() as session:
            row = await self._session_row(session, session_id)
            active = select(TurnRow.id, TurnRow.status).where(
                TurnRow.session_id == row.id, TurnRow.status.in_(ACTIVE_STATUSES)
            )
            locked = (await session.execute(active.with_for_update(key_share=True))).all()
            if any(turn.status is TurnStatus.RUNNING for turn in locked):
                raise Conflict("a turn is running on this session's kernel; cancel it first", code="kernel_busy")
            started = select(func.max(TurnRow.position)).where(
                TurnRow.session_id == row.id, TurnRow.status != TurnStatus.QUEUED
            )
            row.kernel_reset_after = (await session.scalar(started)) or 0
            await session.flush()  # waits for a submission holding the session's row
            if {turn.id for turn in (await session.execute(active)).all()} - {turn.id for turn in locked}:
                raise _TurnArrived

    async def kernel_reset_after(self, session_id: str) -> int:
        """Up to which of the session's turns its kernels are void (:meth:`reset_kernel`); 0: none."""
        query = select(SessionRow.kernel_reset_after).where(SessionRow.id == session_id)
        async with self.db.read() as session:
            return (await session.scalar(query)) or 0

    async def renew_leases(self, runner: str, turn_ids: Collection[str], lease_seconds: float) -> LeaseRenewal:
        """Extend ``runner``'s leases on ``turn_ids``: which of them a cancel was asked for, and which it no
        longer holds (they ended, e.g. another process ended them ``interrupted`` when this lease lapsed)."""
        if not turn_ids:
            return LeaseRenewal()
        mine = (TurnRow.id.in_(list(turn_ids)), TurnRow.runner == runner, TurnRow.status.in_(ACTIVE_STATUSES))
        # Locked in id order first, as the journal's group commit locks turns: no cycle of waits. FOR NO
        # KEY UPDATE (key_share), what an UPDATE takes anyway: a transaction storing events holds their
        # turns' keys (the foreign key), and FOR UPDATE would wait on it - deadlock with a journal that
        # stores events of two turns, which PostgreSQL breaks only after a second.
        locked = select(TurnRow.id).where(*mine).order_by(TurnRow.id).with_for_update(key_share=True)
        async with self.db.write() as session:
            held = await session.execute(
                update(TurnRow)
                .where(TurnRow.id.in_(locked.scalar_subquery()))
                .values(lease_expires_at=lease_end(lease_seconds))
                .returning(TurnRow.id, TurnRow.cancel_requested)
                .execution_options(synchronize_session=False)
            )
            rows = held.all()
        return LeaseRenewal(
            cancelled={turn_id for turn_id, cancel in rows if cancel},
            lost=set(turn_ids) - {turn_id for turn_id, _ in rows},
        )

    async def request_cancel(self, turn_id: str) -> TurnRecord:
        """Flag an active turn for its runner to cancel, and tell the runner at once."""
        async with self.db.write() as session:
            await session.execute(
                update(TurnRow)
                .where(TurnRow.id == turn_id, TurnRow.status.in_(ACTIVE_STATUSES))
                .values(cancel_requested=True)
            )
            await notify(self.db, session, Channel.CANCEL, [turn_id])
            row = await session.get(TurnRow, turn_id)
            if row is None:
                raise NotFound("turn", turn_id)
            return TurnRecord.of(row)
