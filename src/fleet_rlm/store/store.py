"""Fleet's durable state: the queries and transactions over :mod:`fleet_rlm.store.tables`.

Every method is one transaction. A turn is created ``queued``, becomes ``running``, and ends in
:meth:`Store.finish_turn`, which commits its status, answer, terminal event and file changes at once,
so a crash never leaves half a turn behind (:meth:`Store.commit_turns` starts and ends the turns of a
process together, with their events); :meth:`Store.interrupt_turns` closes turns whose process died.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import AsyncIterable, Collection, Sequence
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.exc import StaleDataError

from fleet_rlm.protocol.events import Event, new_id
from fleet_rlm.protocol.ids import BUILTIN_PROGRAM_VERSION, SESSION_ID_PREFIX, is_session_id, new_session_id
from fleet_rlm.protocol.payloads import TurnInterrupted
from fleet_rlm.protocol.status import ACTIVE_STATUSES, FINAL_STATUSES, TurnStatus
from fleet_rlm.store.base import event_row, id_chunks
from fleet_rlm.store.errors import Conflict, Invalid, NotFound, StoreError
from fleet_rlm.store.evaluation import EvalQueries, serving_program
from fleet_rlm.store.events import EventQueries
from fleet_rlm.store.files import FileQueries
from fleet_rlm.store.leases import LeaseQueries
from fleet_rlm.store.memory import MemoryQueries
from fleet_rlm.store.notify import Channel, notify
from fleet_rlm.store.records import (
    FileChanges,
    FileRecord,
    Interrupting,
    MemoryRecord,
    NewTurn,
    ProgramRecord,
    Queued,
    SessionRecord,
    TurnCommit,
    TurnEnd,
    TurnRecord,
    TurnStart,
    row_values,
)
from fleet_rlm.store.submissions import Created, create_together
from fleet_rlm.store.tables import TURNS, EventRow, SessionRow, TurnRow, utcnow


def _version(program: ProgramRecord | None) -> str:
    return BUILTIN_PROGRAM_VERSION if program is None else program.version


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_EDITABLE_SESSION_FIELDS = frozenset({"name", "title", "mode", "settings"})
RESERVED_SESSION_NAMES = frozenset({"import"})
"""Names a URL already uses: ``/sessions/import`` is the import route."""


def check_session_name(name: str) -> str:
    if not _NAME.fullmatch(name) or is_session_id(name) or name in RESERVED_SESSION_NAMES:
        raise Invalid(
            f"session name {name!r} is not valid: use 1-64 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit and not with {SESSION_ID_PREFIX + '_'!r}, "
            f"and not {' or '.join(map(repr, sorted(RESERVED_SESSION_NAMES)))}",
            code="invalid_session_name",
        )
    return name


class Store(FileQueries, EventQueries, MemoryQueries, EvalQueries, LeaseQueries):
    """Sessions and turns here; files, events, memory and evaluation data in their own query groups."""

    # Sessions ---------------------------------------------------------------------------------

    async def create_session(
        self,
        *,
        name: str | None = None,
        title: str | None = None,
        mode: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> SessionRecord:
        if name is not None:
            check_session_name(name)
        row = SessionRow(id=new_session_id(), name=name, title=title, mode=mode, settings=dict(settings or {}))
        try:
            async with self.db.write() as session:
                session.add(row)
        except IntegrityError as exc:
            raise Conflict(f"a session named {name!r} already exists", code="session_name_taken") from exc
        return SessionRecord.of(row)

    async def get_session(self, ref: str) -> SessionRecord:
        """The session whose id or unique name is ``ref``."""
        async with self.db.read() as session:
            return SessionRecord.of(await self._session_row(session, ref))

    async def list_sessions(self, *, limit: int = 50, offset: int = 0) -> list[SessionRecord]:
        query = select(SessionRow).order_by(SessionRow.updated_at.desc(), SessionRow.id).limit(limit).offset(offset)
        async with self.db.read() as session:
            return [SessionRecord.of(row) for row in (await session.execute(query)).scalars()]

    async def update_session(self, ref: str, **changes: Any) -> SessionRecord:
        unknown = set(changes) - _EDITABLE_SESSION_FIELDS
        if unknown:
            raise Invalid(f"session field {sorted(unknown)[0]!r} cannot be changed")
        if changes.get("name") is not None:
            check_session_name(changes["name"])
        try:
            async with self.db.write() as session:
                row = await self._session_row(session, ref)
                for key, value in changes.items():
                    setattr(row, key, dict(value or {}) if key == "settings" else value)
                row.updated_at = utcnow()
        except IntegrityError as exc:
            raise Conflict(
                f"a session named {changes.get('name')!r} already exists", code="session_name_taken"
            ) from exc
        return SessionRecord.of(row)

    async def delete_session(self, ref: str) -> SessionRecord:
        """Delete a session with its turns, events and file records (not its bytes on disk)."""
        async with self.db.write() as session:
            row = await self._session_row(session, ref)
            active = await self._active_turn(session, row.id)
            if active is not None:
                raise Conflict(
                    f"session {ref!r} has turn {active.id} {active.status}; cancel it first", code="session_busy"
                )
            record = SessionRecord.of(row)
            await session.delete(row)
        return record

    async def restore_session(
        self,
        session: SessionRecord,
        turns: Sequence[TurnRecord],
        events: AsyncIterable[Sequence[Event]],
        files: Sequence[FileRecord],
        memories: Sequence[MemoryRecord] = (),
    ) -> SessionRecord:
        """Insert a whole session (an import) in one transaction; ids must be fresh. ``events``
        come in batches, inserted as they arrive (an archive's may not fit in memory); ``memories``
        become entries proposed by the restored session."""
        if session.name is not None:
            check_session_name(session.name)
        for turn in turns:
            if turn.status not in FINAL_STATUSES:
                raise Invalid(f"turn {turn.id} is {turn.status}; only finished turns can be restored")
        row = SessionRow(**row_values(session, _columns(SessionRow)))
        try:
            async with self.db.write() as db:
                db.add(row)
                await db.flush()
                for turn in turns:
                    values = row_values(turn, _columns(TurnRow))
                    values.update(session_id=session.id, created_at=turn.created_at or utcnow())
                    db.add(TurnRow(**values))
                await db.flush()
                async for batch in events:
                    if batch:
                        await db.execute(insert(EventRow), [event_row(e) for e in batch])
                await self._apply_file_changes(db, session.id, FileChanges(upserts=list(files)), None)
                await self._add_memories(db, session.id, memories)
        except IntegrityError as exc:
            raise Conflict(f"a session named {session.name!r} already exists", code="session_name_taken") from exc
        return SessionRecord.of(row)

    # Turns ------------------------------------------------------------------------------------

    async def _active_turn(self, session: AsyncSession, session_id: str) -> TurnRow | None:
        query = select(TurnRow).where(TurnRow.session_id == session_id, TurnRow.status.in_(ACTIVE_STATUSES))
        return (await session.execute(query)).scalar_one_or_none()

    async def create_turn(
        self,
        session_ref: str,
        message: str,
        *,
        context_paths: Sequence[str] = (),
        options: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        runner: str | None = None,
        lease_seconds: float | None = None,
        history: list[tuple[str, str | None]] | None = None,
        turn_id: str | None = None,
    ) -> tuple[TurnRecord, bool]:
        """Queue a turn; returns it and whether it is new. The same idempotency key returns the
        turn it first created; another turn still queued or running raises ``turn_in_progress``.

        With ``runner`` the turn is claimed by it at once (under a lease of ``lease_seconds``, if given);
        without, it waits for a worker to claim it, and workers are told."""
        queued = await self._create_one(
            NewTurn(
                session_ref, message, context_paths, options, idempotency_key, runner, lease_seconds, history, turn_id
            )
        )
        return queued.turn, queued.created

    async def create_turns(self, news: Sequence[NewTurn]) -> list[Created]:
        """Queue several turns in one transaction (in order), each answered as :meth:`create_turn` would:
        its turn and whether it is new (with its session), or the error it would raise. If that
        transaction fails on a constraint (a concurrent writer came between), each is queued alone."""
        try:
            return await self._create_together(news)
        except (IntegrityError, StaleDataError):  # a concurrent writer came between (a session deleted, say)
            return [await self._create_alone(new) for new in news]

    async def _create_one(self, new: NewTurn) -> Queued:
        for attempt in range(2):
            try:
                (answer,) = await self._create_together([new])
            except IntegrityError:
                # A concurrent request won the race; the second pass reports what it created.
                if attempt:
                    raise
                continue
            if isinstance(answer, Exception):
                raise answer
            return answer
        raise AssertionError("unreachable")

    async def _create_alone(self, new: NewTurn) -> Created:
        try:
            return await self._create_one(new)
        except Exception as exc:  # its own answer: the others' stand
            return exc

    async def _create_together(self, news: Sequence[NewTurn]) -> list[Created]:
        async with self.db.write() as session:
            answers, added = await create_together(session, news)
            queued = [row.id for row in added if row.runner is None]
            if queued:
                await notify(self.db, session, Channel.QUEUED, queued)
        return answers

    async def get_turn(self, turn_id: str) -> TurnRecord:
        async with self.db.read_connection() as connection:
            row = (await connection.execute(select(TURNS).where(TURNS.c.id == turn_id))).one_or_none()
        if row is None:
            raise NotFound("turn", turn_id)
        return TurnRecord.of(row)

    async def list_turns(self, session_id: str, *, after: int = 0, limit: int = 50) -> list[TurnRecord]:
        """Turns of a session in order, those with ``position > after`` first."""
        query = (
            select(TurnRow)
            .where(TurnRow.session_id == session_id, TurnRow.position > after)
            .order_by(TurnRow.position)
            .limit(limit)
        )
        async with self.db.read() as session:
            return [TurnRecord.of(row) for row in (await session.execute(query)).scalars()]

    async def active_turns(self, *, lease_lapsed: bool = False) -> list[TurnRecord]:
        """Queued and running turns; with ``lease_lapsed`` only those whose runner's lease has lapsed."""
        query = select(TurnRow).where(TurnRow.status.in_(ACTIVE_STATUSES))
        if lease_lapsed:
            query = query.where(TurnRow.lease_expires_at < utcnow())
        async with self.db.read() as session:
            return [TurnRecord.of(row) for row in (await session.execute(query)).scalars()]

    async def mark_running(self, turn_id: str, *, events: Sequence[Event] = ()) -> bool:
        """queued -> running, recording the version of the program that serves, with ``events`` (its
        ``turn.started``); False when the turn is no longer queued (cancelled meanwhile): nothing is
        stored then."""
        async with self.db.write() as session:
            program = await serving_program(session)
            result = await session.execute(
                update(TurnRow)
                .where(TurnRow.id == turn_id, TurnRow.status == TurnStatus.QUEUED)
                .values(status=TurnStatus.RUNNING, started_at=utcnow(), program_version=_version(program))
            )
            started = bool(result.rowcount)  # type: ignore[attr-defined]
            if started and events:
                await session.execute(insert(EventRow), [event_row(e) for e in events])
                await notify(self.db, session, Channel.EVENTS, [turn_id])
            return started

    async def set_trace_id(self, turn_id: str, trace_id: str) -> None:
        async with self.db.write() as session:
            await session.execute(update(TurnRow).where(TurnRow.id == turn_id).values(trace_id=trace_id))

    async def finish_turn(
        self,
        turn_id: str,
        *,
        status: TurnStatus,
        answer: str | None = None,
        answer_source: str | None = None,
        unverified_reason: str | None = None,
        error: str | None = None,
        usage: dict[str, Any] | None = None,
        artifacts: list[dict[str, Any]] | None = None,
        evidence: list[str] | None = None,
        events: Sequence[Event] = (),
        files: FileChanges | None = None,
    ) -> TurnRecord:
        """End an active turn: status, answer, its last events and file changes in one transaction.

        Raises ``turn_not_active`` (and commits nothing) when the turn already ended, e.g. because
        start-up reconciliation marked it interrupted.
        """
        end = TurnEnd(
            turn_id,
            status,
            answer=answer,
            answer_source=answer_source,
            unverified_reason=unverified_reason,
            error=error,
            usage=usage,
            artifacts=artifacts,
            evidence=evidence,
            events=events,
            files=files,
        )
        return await self.end_turn(end)

    async def end_turn(self, end: TurnEnd) -> TurnRecord:
        """:meth:`finish_turn` for an end already gathered (a turn's commit of its own, after its group
        commit failed); raises ``turn_not_active`` or ``NotFound`` as it does."""
        (result,) = (await self.commit_turns(ends=[end])).ended
        if isinstance(result, StoreError):
            raise result
        return result

    async def commit_turns(
        self, *, starts: Sequence[TurnStart] = (), events: Sequence[Event] = (), ends: Sequence[TurnEnd] = ()
    ) -> TurnCommit:
        """In one transaction (the group commit of the turns a process runs): mark each of ``starts``
        running (as :meth:`mark_running`, with its events; the program they run is read once for all and
        returned), store ``events`` (of any turns still active; the others are returned as refused, as
        :meth:`append_events` does), and end each turn of ``ends``.
        Each end's result is its turn as ended, or the error that left it alone: ``NotFound``, or
        ``turn_not_active`` when it already ended. Any other error rolls everything back.

        Every turn started or ended is locked first, in id order (as :meth:`renew_leases` locks), so two
        such transactions never wait on each other in a cycle; the events' turns are only read
        ``FOR KEY SHARE``, which waits for nothing but an end of the turn elsewhere (one turn locked
        ``FOR UPDATE`` per transaction, waiting for nothing else). Under load every round trip to the database
        waits for a busy event loop, so each part is one statement for all its turns where it can be."""
        for end in ends:
            if end.status not in FINAL_STATUSES:
                raise Invalid(f"{end.status!r} is not a final turn status")
        results: list[TurnRecord | Conflict | NotFound] = []
        sessions: set[str] = set()
        async with self.db.write() as session:
            now = utcnow()
            ids = sorted({s.turn_id for s in starts} | {e.turn_id for e in ends})
            locked = select(TurnRow).where(TurnRow.id.in_(ids)).order_by(TurnRow.id).with_for_update(key_share=True)
            rows = {row.id: row for row in (await session.execute(locked)).scalars()} if ids else {}
            program = await serving_program(session) if starts else None
            started = await self._start_turns(session, starts, rows, now, _version(program))
            announced = [e for s in starts if s.turn_id in started for e in s.events]
            ending = {end.turn_id: end for end in reversed(ends)}  # the first end of a turn is the one
            own = [
                e
                for end in ending.values()
                if (row := rows.get(end.turn_id)) and row.status in ACTIVE_STATUSES
                for e in end.events
            ]
            # Stored before any end below changes its turn: a turn's events put with its end are kept.
            stored = [*events, *announced, *own]
            refused = await self._store_events(session, stored) if stored else set()
            for end in ends:
                row = rows.get(end.turn_id)
                if row is None:
                    results.append(NotFound("turn", end.turn_id))
                    continue
                if row.status not in ACTIVE_STATUSES:
                    results.append(
                        Conflict(f"turn {end.turn_id} already ended as {row.status}", code="turn_not_active")
                    )
                    continue
                row.status = end.status
                row.answer = end.answer
                row.answer_source = end.answer_source
                row.unverified_reason = end.unverified_reason
                row.error = end.error
                row.usage = dict(end.usage or {})
                row.artifacts = list(end.artifacts or [])
                row.evidence = list(end.evidence or [])
                row.finished_at = now
                if end.files is not None:
                    await self._apply_file_changes(session, row.session_id, end.files, end.turn_id)
                sessions.add(row.session_id)
                results.append(TurnRecord.of(row))
            if sessions:
                await session.execute(update(SessionRow).where(SessionRow.id.in_(sessions)).values(updated_at=now))
            # Turns whose events were stored were notified with them; an end without events still wakes.
            silent = [r.id for r in results if isinstance(r, TurnRecord) and not ending[r.id].events]
            await notify(self.db, session, Channel.EVENTS, silent)
        return TurnCommit(started=started, ended=results, program=program, refused=refused)

    async def _start_turns(
        self,
        session: AsyncSession,
        starts: Sequence[TurnStart],
        rows: dict[str, TurnRow],
        now: dt.datetime,
        program_version: str,
    ) -> set[str]:
        """Mark those of ``starts`` still queued (their rows locked) running ``program_version``, in one
        statement; returns their ids."""
        ids = [
            s.turn_id for s in starts if (row := rows.get(s.turn_id)) is not None and row.status == TurnStatus.QUEUED
        ]
        if ids:
            await session.execute(
                update(TurnRow)
                .where(TurnRow.id.in_(ids))
                .values(status=TurnStatus.RUNNING, started_at=now, program_version=program_version)
                .execution_options(synchronize_session=False)
            )
        for turn_id in ids:  # as stored now, without a second UPDATE at flush
            set_committed_value(rows[turn_id], "status", TurnStatus.RUNNING)
        return set(ids)

    async def interrupt_turns(self, choice: Interrupting, reason: str) -> list[TurnRecord]:
        """Mark the active turns ``choice`` chooses interrupted, each with a terminal
        ``turn.interrupted`` event after its last stored event. The choice is made again on the turn as
        locked for the change, so a turn that changed meanwhile (ended, or its lease renewed) is left.
        With ``choice.lease_lapsed`` only the turns whose lease lapsed are read to be chosen from (the
        periodic sweep's case: it reads none while every runner keeps its leases)."""
        interrupted: list[TurnRecord] = []
        for turn in await self.active_turns(lease_lapsed=choice.lease_lapsed):
            if not choice.chooses(turn):
                continue
            async with self.db.write() as session:
                # FOR UPDATE: waits for any transaction storing events of the turn (it holds the turn's key), so
                # the last seq read below is final; one storing them later sees the turn ended.
                row = await session.get(TurnRow, turn.id, with_for_update=True, populate_existing=True)
                if row is None or row.status not in ACTIVE_STATUSES or not choice.chooses(TurnRecord.of(row)):
                    continue
                last = await session.scalar(select(func.max(EventRow.seq)).where(EventRow.turn_id == turn.id))
                first = (
                    (await session.execute(select(EventRow).where(EventRow.turn_id == turn.id).order_by(EventRow.seq)))
                    .scalars()
                    .first()
                )
                payload = TurnInterrupted(reason=reason)
                event = Event.carrying(
                    payload,
                    seq=(last or 0) + 1,
                    turn_id=turn.id,
                    ts=utcnow().timestamp(),
                    span_id=first.span_id if first is not None else new_id("span"),
                    parent_span_id=None,
                )
                await session.execute(insert(EventRow), [event_row(event)])
                row.status = TurnStatus.INTERRUPTED
                row.error = reason
                row.finished_at = utcnow()
                await self._touch_session(session, row.session_id)
                await notify(self.db, session, Channel.EVENTS, [turn.id])
            interrupted.append(TurnRecord.of(row))
        return interrupted

    async def history(self, session_id: str, *, before_position: int | None = None) -> list[TurnRecord]:
        """Finished turns of a session, oldest first (what the next turn is told)."""
        query = select(TurnRow).where(TurnRow.session_id == session_id, TurnRow.status.in_(FINAL_STATUSES))
        if before_position is not None:
            query = query.where(TurnRow.position < before_position)
        async with self.db.read() as session:
            rows = (await session.execute(query.order_by(TurnRow.position))).scalars()
            return [TurnRecord.of(row) for row in rows]

    async def session_ids(self) -> set[str]:
        async with self.db.read() as session:
            return set((await session.execute(select(SessionRow.id))).scalars())

    async def existing_sessions(self, session_ids: Collection[str]) -> set[str]:
        """Those of ``session_ids`` not deleted."""
        found: set[str] = set()
        async with self.db.read() as session:
            for chunk in id_chunks(list(session_ids)):
                found.update((await session.execute(select(SessionRow.id).where(SessionRow.id.in_(chunk)))).scalars())
        return found


def _columns(table: type[SessionRow | TurnRow]) -> set[str]:
    return set(table.__table__.columns.keys())
