"""Request and response bodies of the HTTP API (pydantic at the edge, records inside)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from fastapi import UploadFile
from pydantic import BaseModel, ConfigDict, Field

from fleet_rlm.api.text import JsonObject, Text
from fleet_rlm.protocol.routes import Mode
from fleet_rlm.protocol.status import AnswerSource, TurnStatus
from fleet_rlm.store import FileRecord, MemoryRecord, SessionRecord, TurnRecord
from fleet_rlm.store.records import MAX_INT32 as MAX_INT32  # what a query parameter may name, past it 422

SESSION_NAME_RULE = (
    "Unique name; usable instead of the id in every URL. 1-64 letters, digits, '.', '_' or '-', starting "
    "with a letter or digit, not with 'ses_', and not 'import' (else 400 invalid_session_name)."
)


def binary_file_part(schema: dict[str, Any]) -> None:
    """A multipart file part: any bytes (``format: binary`` tells generated clients and test tools so)."""
    schema["format"] = "binary"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionCreate(_Strict):
    name: Text | None = Field(None, description=SESSION_NAME_RULE)
    title: Text | None = Field(None, max_length=200)
    mode: Mode | None = None
    settings: JsonObject = Field(default_factory=dict, description="Setting overrides for this session's turns.")


class SessionPatch(_Strict):
    name: Text | None = Field(None, description=SESSION_NAME_RULE)
    title: Text | None = Field(None, max_length=200)
    mode: Mode | None = None
    settings: JsonObject | None = None


class _FromRecord(BaseModel):
    """A response body read from a store record's attributes (same names)."""

    model_config = ConfigDict(from_attributes=True)


class SessionOut(_FromRecord):
    id: str
    name: str | None
    title: str | None
    mode: str | None
    settings: dict[str, Any]
    created_at: dt.datetime
    updated_at: dt.datetime

    @classmethod
    def of(cls, record: SessionRecord) -> SessionOut:
        return cls.model_validate(record)


class SessionPage(BaseModel):
    items: list[SessionOut]
    next_offset: int | None = Field(None, description="Pass as ?offset= for the next page; null at the end.")


class FileOut(_FromRecord):
    path: str = Field(description="Relative to the workspace: files/..., artifacts/... or memory/...")
    size: int
    sha256: str
    kind: str
    media_type: str
    origin: Literal["upload", "artifact", "memory"]
    turn_id: str | None
    updated_at: dt.datetime | None

    @classmethod
    def of(cls, record: FileRecord, kind: str) -> FileOut:
        return cls.model_validate({**vars(record), "kind": kind})


class FileList(BaseModel):
    items: list[FileOut]


MemoryStatus = Literal["pending", "approved", "rejected"]


class MemoryOut(_FromRecord):
    id: str
    text: str = Field(description="What later turns are shown once approved (the person's edit, if any).")
    why: str = Field(description="What the proposing turn said it rests on.")
    status: MemoryStatus = Field(description="pending review, approved (shown to later turns) or rejected.")
    session_id: str | None = Field(description="The session whose turn proposed it; null once deleted.")
    turn_id: str | None = Field(description="The turn that proposed it; null once its session is deleted.")
    created_at: dt.datetime | None
    reviewed_at: dt.datetime | None

    @classmethod
    def of(cls, record: MemoryRecord) -> MemoryOut:
        return cls.model_validate(record)


class MemoryPage(BaseModel):
    items: list[MemoryOut]
    next_offset: int | None = Field(None, description="Pass as ?offset= for the next page; null at the end.")


class MemoryApproval(_Strict):
    text: str | None = Field(
        None, description="The entry as the person edited it (at most memory.max_entry_chars); omit to keep it."
    )


class TurnCreate(_Strict):
    message: Text = Field(min_length=1, description="What the person asks.")
    context_paths: list[Text] = Field(default_factory=list, description="Workspace files the turn must focus on.")
    mode: Mode | None = None
    max_iterations: int | None = Field(None, gt=0)
    max_model_calls: int | None = Field(None, gt=0)
    turn_timeout: float | None = Field(None, gt=0)


class TurnOut(_FromRecord):
    id: str
    session_id: str
    position: int
    message: str
    context_paths: list[str]
    options: dict[str, Any]
    status: TurnStatus
    answer: str | None
    answer_source: AnswerSource | None = Field(
        None, description="How the answer was reached: SUBMIT, extracted when the budget ran out, direct, flex module."
    )
    unverified: bool = Field(False, description="True when the answer was not checked by running code.")
    unverified_reason: str | None = None
    error: str | None
    usage: dict[str, Any]
    artifacts: list[dict[str, Any]]
    evidence: list[str] = Field(
        default_factory=list,
        description="Lines printed by code that ran without error that state the answer's figures or names "
        "(sandbox output: show it escaped); empty when none.",
    )
    program_version: str | None = Field(
        None, description="The program the turn ran: builtin, or an approved optimization's version (v1, ...)."
    )
    trace_id: str | None = Field(
        None,
        description="The turn's trace id in the tracing backend (OpenTelemetry: 32 hex digits; MLflow alone: "
        "tr-...); null when tracing was off.",
    )
    created_at: dt.datetime | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None

    @classmethod
    def of(cls, record: TurnRecord) -> TurnOut:
        return cls.model_validate(record)


class TurnPage(BaseModel):
    items: list[TurnOut]
    next_after: int | None = Field(None, description="Pass as ?after= for the next page; null at the end.")


class StreamTicket(BaseModel):
    ticket: str = Field(description="Pass as ?ticket= on the event stream; good once, until expires_at.")
    expires_at: dt.datetime
    url: str = Field(description="The event stream's path with the ticket, ready for EventSource.")


class KernelsSummary(BaseModel):
    live: int = Field(description="session kernels this server process keeps live")
    memory_bytes: int = Field(description="their resident memory, idle ones included")


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    version: str
    kernels: KernelsSummary


class KernelVariableOut(BaseModel):
    name: str
    type: str = Field(description="e.g. `DataFrame (1000, 3)`, `dict`")
    size: int = Field(description="bytes, as estimated inside the sandbox")
    preview: str | None = Field(description="a short repr for small values, else null")


class LostVariableOut(BaseModel):
    name: str
    reason: str


class KernelSnapshotOut(BaseModel):
    saved: list[str] = Field(description="variables the last snapshot holds")
    lost: list[LostVariableOut] = Field(description="variables it could not hold, and why")
    bytes: int
    at: float = Field(description="when it was taken (Unix seconds)")


class KernelEndOut(BaseModel):
    reason: Literal["idle", "lru", "restart", "server_restart", "died"]
    detail: str
    at: float | None


class KernelOut(BaseModel):
    """A session's kernel: the sandbox whose Python state lives on across its turns (docs/kernels.md)."""

    live: bool = Field(description="whether a kernel is live for the session in this server process")
    sandbox_id: str | None
    started_at: float | None = Field(description="Unix seconds")
    idle_seconds: float | None = Field(description="null while a turn runs on it, or when none is live")
    busy: bool
    memory_bytes: int | None = Field(description="resident memory of its processes")
    variables: list[KernelVariableOut] = Field(description="its user variables, as of the end of the last turn")
    snapshot: KernelSnapshotOut | None = Field(description="the session's last snapshot, restored into a fresh kernel")
    ended: KernelEndOut | None = Field(description="how the last kernel ended, when none is live")


class Check(BaseModel):
    ok: bool
    message: str


class Ready(BaseModel):
    ready: bool
    """The database and the sandbox backend pass; the model endpoint is reported beside them, not required."""
    database: Check
    sandbox: Check
    model: Check


class FileUpload(BaseModel):
    """The multipart body of an upload. Text parts are plain strings: a form cannot send null."""

    file: UploadFile = Field(description="The file's bytes", json_schema_extra=binary_file_part)
    path: Text = Field(
        "", description="Where to put it, relative to files/ (default: the file's name); no control characters"
    )


class ArchiveUpload(BaseModel):
    """The multipart body of a session import."""

    archive: UploadFile = Field(
        description="A session archive from GET /sessions/{session}/export", json_schema_extra=binary_file_part
    )
    name: Text = Field("", description="Name for the new session (default: the archived one)")
