"""Request and response bodies of the evaluation and optimization routes (docs/evaluation.md)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fleet_rlm.api.text import JsonObject, Text
from fleet_rlm.store import LabelRecord, ProgramRecord

GROUP_RULE = "Source group: 1-64 letters, digits, '.', '_' or '-' (default: the session's name or id)."


class LabelCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turn_id: Text = Field(max_length=40, description="A finished turn captured with capture_replays.")
    answer: Text = Field(max_length=100_000, description="The reviewed, approved answer.")
    value: float | Text | None = Field(None, description="The exact value the answer must state.")
    expectations: JsonObject | None = Field(
        None, description="Structured checks (docs/evaluation.md#expectations); 422 invalid_expectations if wrong."
    )
    group: Text | None = Field(None, max_length=64, description=GROUP_RULE)
    critical: bool = False
    benchmark: bool = False


class LabelOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    turn_id: str
    session_id: str
    answer: str
    value: Any = None
    expectations: dict[str, Any]
    group: str
    critical: bool
    benchmark: bool
    created_at: dt.datetime | None

    @classmethod
    def of(cls, record: LabelRecord) -> LabelOut:
        return cls.model_validate(record)


class LabelList(BaseModel):
    items: list[LabelOut]


class EvalRunCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session: Text | None = Field(None, max_length=64, description="Only this session's labels (id or name).")
    groups: list[Text] = Field(default_factory=list, max_length=100, description="Only labels of these groups.")


class OptimizationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session: Text | None = Field(None, max_length=64, description="Only this session's labels (id or name).")
    gepa_budget: Literal["light", "medium", "heavy"] | None = Field(None, description="GEPA's preset budget.")
    max_metric_calls: int | None = Field(None, ge=1, le=100_000, description="Or GEPA's budget in replays.")


class RunOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    kind: Literal["eval", "optimization"]
    status: Literal["running", "completed", "failed"]
    started_at: dt.datetime
    finished_at: dt.datetime | None
    done: int = Field(description="Replays finished (eval runs).")
    total: int = Field(description="Replays to run (eval runs; 0 for optimizations).")
    error: str | None
    result: dict[str, Any] | None = Field(
        description="When completed: the eval report (scores, feedback, mean), or the optimization's candidate "
        "version and whether its gate passed."
    )


class RunList(BaseModel):
    items: list[RunOut]


class ProgramOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    version: str
    status: Literal["candidate", "approved", "retired"]
    serving: bool = Field(False, description="True for the program the next turn runs.")
    sha256: str = Field(description="Of the program's canonical JSON, as its report recorded it.")
    report: dict[str, Any] = Field(description="The gate report: every condition with pass or fail and its numbers.")
    created_at: dt.datetime | None
    approved_at: dt.datetime | None
    retired_at: dt.datetime | None

    @classmethod
    def of(cls, record: ProgramRecord, serving: str) -> ProgramOut:
        out = cls.model_validate(record)
        out.serving = record.version == serving
        return out


class ProgramList(BaseModel):
    serving: str = Field(description="The version the next turn runs: builtin, or an approved one.")
    items: list[ProgramOut]
