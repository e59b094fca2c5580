"""Evaluation data: the replay snapshots of captured turns, the labels maintainers give them, and the
programs optimization runs produce (candidates, the approved one that serves, retired ones)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from fleet_rlm.protocol.events import new_id
from fleet_rlm.store.base import StoreBase
from fleet_rlm.store.errors import Conflict, NotFound
from fleet_rlm.store.records import LabelRecord, ProgramRecord, ReplayRecord
from fleet_rlm.store.tables import LabelRow, ProgramRow, ReplayRow, utcnow

LABEL_ID_PREFIX = "lbl"


def _serving(*columns: Any) -> Select[Any]:
    """``columns`` of the program that serves (the most recently approved one not rolled back)."""
    return (
        select(*columns)
        .where(ProgramRow.status == "approved")
        .order_by(ProgramRow.approved_at.desc(), ProgramRow.version.desc())
        .limit(1)
    )


async def serving_program(session: AsyncSession) -> ProgramRecord | None:
    """The program that serves, as ``session`` sees it; None: the built-in one."""
    row = (await session.execute(_serving(ProgramRow))).scalar_one_or_none()
    return None if row is None else ProgramRecord.of(row)


class EvalQueries(StoreBase):
    async def save_replay(self, turn_id: str, session_id: str, snapshot: dict[str, Any]) -> ReplayRecord:
        """Keep a turn's snapshot; a snapshot is written once and never replaced (``replay_exists``)."""
        row = ReplayRow(turn_id=turn_id, session_id=session_id, snapshot=dict(snapshot), created_at=utcnow())
        try:
            async with self.db.write() as session:
                session.add(row)
        except IntegrityError as exc:
            raise Conflict(f"turn {turn_id} already has a replay snapshot", code="replay_exists") from exc
        return ReplayRecord.of(row)

    async def get_replay(self, turn_id: str) -> ReplayRecord:
        async with self.db.read() as session:
            row = await session.get(ReplayRow, turn_id)
            if row is None:
                raise NotFound("replay", turn_id)
            return ReplayRecord.of(row)

    async def replay_blobs(self, session_id: str) -> set[str]:
        """The sha256 of every input file the session's snapshots name (their bytes must be kept)."""
        query = select(ReplayRow.snapshot).where(ReplayRow.session_id == session_id)
        async with self.db.read() as session:
            snapshots: list[dict[str, Any]] = list((await session.execute(query)).scalars())
        return {str(f["sha256"]) for snap in snapshots for f in snap.get("files", []) if "sha256" in f}

    async def add_label(
        self,
        *,
        turn_id: str,
        session_id: str,
        answer: str,
        group: str,
        value: Any = None,
        expectations: dict[str, Any] | None = None,
        critical: bool = False,
        benchmark: bool = False,
    ) -> LabelRecord:
        row = LabelRow(
            id=new_id(LABEL_ID_PREFIX),
            turn_id=turn_id,
            session_id=session_id,
            answer=answer,
            value=value,
            expectations=dict(expectations or {}),
            group=group,
            critical=critical,
            benchmark=benchmark,
            created_at=utcnow(),
        )
        try:
            async with self.db.write() as session:
                session.add(row)
        except IntegrityError as exc:
            raise Conflict(
                f"turn {turn_id} is labeled already; remove its label first (fleet eval rm)", code="label_exists"
            ) from exc
        return LabelRecord.of(row)

    async def list_labels(self, *, session_id: str | None = None, groups: list[str] | None = None) -> list[LabelRecord]:
        """Labels, oldest first; only those of ``session_id`` and of ``groups`` when given."""
        query = select(LabelRow)
        if session_id is not None:
            query = query.where(LabelRow.session_id == session_id)
        if groups:
            query = query.where(LabelRow.group.in_(groups))
        query = query.order_by(LabelRow.created_at, LabelRow.id)
        async with self.db.read() as session:
            return [LabelRecord.of(row) for row in (await session.execute(query)).scalars()]

    async def get_label(self, ref: str) -> LabelRecord:
        """The label with id ``ref``, or the label of turn ``ref``."""
        async with self.db.read() as session:
            return LabelRecord.of(await _label_row(session, ref))

    async def delete_label(self, ref: str) -> LabelRecord:
        async with self.db.write() as session:
            row = await _label_row(session, ref)
            record = LabelRecord.of(row)
            await session.delete(row)
        return record

    # Programs -------------------------------------------------------------------------------------

    async def next_program_version(self) -> str:
        async with self.db.read() as session:
            count = await session.scalar(select(func.count()).select_from(ProgramRow))
        return f"v{(count or 0) + 1}"

    async def add_program(self, version: str, content: str, sha256: str, report: dict[str, Any]) -> ProgramRecord:
        """Save an optimization's candidate, inactive."""
        row = ProgramRow(
            version=version, status="candidate", content=content, sha256=sha256, report=report, created_at=utcnow()
        )
        try:
            async with self.db.write() as session:
                session.add(row)
        except IntegrityError as exc:
            raise Conflict(f"program {version} exists already", code="program_exists") from exc
        return ProgramRecord.of(row)

    async def get_program(self, version: str) -> ProgramRecord:
        async with self.db.read() as session:
            row = await session.get(ProgramRow, version)
            if row is None:
                raise NotFound("program", version)
            return ProgramRecord.of(row)

    async def list_programs(self) -> list[ProgramRecord]:
        """Every program, oldest first."""
        query = select(ProgramRow).order_by(ProgramRow.created_at, ProgramRow.version)
        async with self.db.read() as session:
            return [ProgramRecord.of(row) for row in (await session.execute(query)).scalars()]

    async def active_program(self) -> ProgramRecord | None:
        """The program that serves: the most recently approved one not rolled back; None: the built-in one."""
        async with self.db.read() as session:
            return await serving_program(session)

    async def approve_program(self, version: str, *, incumbent: str | None) -> ProgramRecord:
        """Make candidate ``version`` the serving program, if ``incumbent`` (a version, None: the built-in
        program) still serves; the check and the change are one transaction."""
        async with self.db.write() as session:
            row = await session.get(ProgramRow, version, with_for_update=True)
            if row is None:
                raise NotFound("program", version)
            if row.status != "candidate":
                raise Conflict(f"program {version} is {row.status}, not a candidate", code="program_not_candidate")
            serving = (await session.execute(_serving(ProgramRow.version))).scalar_one_or_none()
            if serving != incumbent:
                raise Conflict(
                    f"program {serving or 'builtin'} serves now, not {incumbent or 'builtin'} as when {version} was "
                    "evaluated: run fleet optimize again to re-evaluate",
                    code="stale_evidence",
                )
            row.status = "approved"
            row.approved_at = utcnow()
        return ProgramRecord.of(row)

    async def retire_active_program(self) -> ProgramRecord:
        """Roll back: the serving program is retired, and the one approved before it (or the built-in
        program) serves again."""
        async with self.db.write() as session:
            row = (await session.execute(_serving(ProgramRow).with_for_update())).scalar_one_or_none()
            if row is None:
                raise Conflict(
                    "the built-in program serves; there is nothing to roll back", code="nothing_to_roll_back"
                )
            row.status = "retired"
            row.retired_at = utcnow()
        return ProgramRecord.of(row)


async def _label_row(session: Any, ref: str) -> LabelRow:
    row = await session.get(LabelRow, ref)
    if row is None:
        row = (await session.execute(select(LabelRow).where(LabelRow.turn_id == ref))).scalar_one_or_none()
    if row is None:
        raise NotFound("label", ref)
    return row  # type: ignore[no-any-return]
