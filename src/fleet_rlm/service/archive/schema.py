"""What a session archive may hold, field by field: its manifest (the session, its turns, files and
memory entries) and each line of its events files, as pydantic models.

An archive is outside data, whoever made it: every field is held to the rule the API holds the same
value to (text that is text, integers the database holds, timestamps that are aware and convert to
UTC, a file's path and media type as an upload's), and a refusal names the field
(``turns[0].created_at``, ``events/1.jsonl[3].seq``). The import stores only what these models give.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from fleet_rlm.protocol.events import EventDataError, EventType
from fleet_rlm.protocol.payloads import parsed_payload
from fleet_rlm.protocol.status import FINAL_STATUSES, AnswerSource, TurnStatus
from fleet_rlm.service.files import ORIGIN_OF_DIR, clean_path, input_path, is_media_type, stored_path
from fleet_rlm.service.memory import MAX_WHY_CHARS, check_text
from fleet_rlm.store import Invalid
from fleet_rlm.store.records import MAX_INT32

MAX_TITLE = 200
MAX_MEMORY_ENTRIES = 1000
MAX_FILE_SIZE = 2**63 - 1
"""A file's size as the database holds it (``bigint``)."""
MAX_SPAN_ID = 200
MEMORY_TEXT_LIMIT = "max_entry_chars"
"""The validation context's key for ``memory.max_entry_chars``, the longest memory text."""
Model = TypeVar("Model", bound=BaseModel)


class ArchiveFieldInvalid(Invalid):
    """A field of the archive breaks its rule; the message names the field."""

    code = "invalid_archive_field"


def _refuse(text: str) -> PydanticCustomError:
    # The text goes in the context: it may hold braces, which a message template would read.
    return PydanticCustomError("archive_field", "{text}", {"text": text})


def _timestamp(value: object) -> dt.datetime:
    """An ISO 8601 timestamp, as UTC (one without an offset is UTC, as exports before offsets were)."""
    if not isinstance(value, str):
        raise _refuse(f"must be an ISO 8601 timestamp as text, not {type(value).__name__}")
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise _refuse(f"{value[:80]!r} is not an ISO 8601 timestamp") from None
    try:
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).astimezone(dt.UTC)
    except OverflowError:
        raise _refuse(f"{value[:80]!r} is out of range once converted to UTC") from None


def _finished(status: TurnStatus) -> TurnStatus:
    if status not in FINAL_STATUSES:
        raise _refuse(f"{status.value!r} is not a finished status ({', '.join(sorted(FINAL_STATUSES))})")
    return status


def _version_name(value: str) -> str:
    """The version of the program a turn ran (``builtin``, ``v3``), as the turns table holds it."""
    if not 1 <= len(value) <= 40 or not all(c.isascii() and (c.isalnum() or c in "._-") for c in value):
        raise _refuse("must be a version name of at most 40 characters (letters, digits, '.', '_', '-')")
    return value


def _path(clean: Any, value: str) -> str:
    try:
        return str(clean(value))
    except Invalid as exc:
        raise _refuse(exc.message) from None


def _media_type(value: str) -> str:
    if not is_media_type(value):
        raise _refuse(f"{value[:80]!r} is not a media type (a lowercase type/subtype, as uploads are stored)")
    return value


Text = Annotated[str, Field(strict=True)]
Position = Annotated[int, Field(strict=True, ge=1, le=MAX_INT32)]
Object = Annotated[dict[str, Any], Field(strict=True)]
Timestamp = Annotated[dt.datetime, BeforeValidator(_timestamp)]


class _Archived(BaseModel):
    """Fields an archive does not know (a newer Fleet's) are left out; the version says what it holds."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class ArchivedSession(_Archived):
    name: Text | None = None
    title: Annotated[str, Field(strict=True, max_length=MAX_TITLE)] | None = None
    mode: Text | None = None
    settings: Object | None = None
    created_at: Timestamp | None = None


class ArchivedTurn(_Archived):
    position: Position
    message: Text
    status: Annotated[TurnStatus, AfterValidator(_finished)]
    context_paths: list[Annotated[str, Field(strict=True), AfterValidator(lambda p: _path(clean_path, p))]] = []
    options: Object | None = None
    answer: Text | None = None
    answer_source: AnswerSource | None = None
    unverified_reason: Text | None = None
    error: Text | None = None
    usage: Object | None = None
    artifacts: list[Object] | None = None
    evidence: list[Text] | None = None
    program_version: Annotated[str, Field(strict=True), AfterValidator(_version_name)] | None = None
    created_at: Timestamp | None = None
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None


class ArchivedFile(_Archived):
    path: Annotated[str, Field(strict=True), AfterValidator(lambda p: _path(stored_path, _path(input_path, p)))]
    size: Annotated[int, Field(strict=True, ge=0, le=MAX_FILE_SIZE)]
    sha256: Annotated[str, Field(strict=True, pattern="^[0-9a-f]{64}$")]
    media_type: Annotated[str, Field(strict=True), AfterValidator(_media_type)]
    origin: Literal["upload", "artifact", "memory"]

    @model_validator(mode="after")
    def _origin_of_its_directory(self) -> Self:
        """Each directory has one origin: an upload under ``files/``, an artifact under ``artifacts/``;
        under ``memory/`` only a file kept from before memory was reviewed, which turns never get."""
        top = self.path.split("/", 1)[0]
        if ORIGIN_OF_DIR[top] != self.origin:
            raise _refuse(
                f"{self.path!r} has origin {self.origin!r}; under {top}/ a file can only be of origin "
                f"{ORIGIN_OF_DIR[top]!r} (memory/ holds only reviewed memory, never an upload or artifact)"
            )
        return self


class ArchivedMemory(_Archived):
    text: Text
    why: Text | None = None
    status: Literal["pending", "approved", "rejected"] | None = None
    turn_position: Position | None = None
    created_at: Timestamp | None = None

    @field_validator("text")
    @classmethod
    def _entry_text(cls, value: str, info: ValidationInfo) -> str:
        """Checked as a turn's proposal is (the longest is this server's ``memory.max_entry_chars``)."""
        limit = (info.context or {})[MEMORY_TEXT_LIMIT]
        return _memory_text(value, "text", limit)

    @field_validator("why")
    @classmethod
    def _reason(cls, value: str | None) -> str:
        return _memory_text(value or "", "why", MAX_WHY_CHARS, allow_empty=True)


def _memory_text(value: str, what: str, limit: int, *, allow_empty: bool = False) -> str:
    try:
        return check_text(value, what=what, limit=limit, allow_empty=allow_empty)
    except Invalid as exc:
        raise _refuse(exc.message) from None


class ArchiveManifest(_Archived):
    """``manifest.json`` past its format and version (checked first, with their own messages)."""

    session: ArchivedSession = ArchivedSession()
    turns: list[ArchivedTurn] = []
    files: list[ArchivedFile] = []
    memory: Annotated[list[ArchivedMemory], Field(max_length=MAX_MEMORY_ENTRIES)] = []

    @model_validator(mode="after")
    def _each_once(self) -> Self:
        positions = [turn.position for turn in self.turns]
        paths = [file.path for file in self.files]
        for what, values in (("turns", positions), ("files", paths)):
            seen: set[object] = set()
            for index, value in enumerate(values):
                if value in seen:
                    raise _refuse(f"{what}[{index}]: {value!r} appears twice in the archive")
                seen.add(value)
        return self


class ArchivedEvent(_Archived):
    """One line of ``events/<n>.jsonl`` (its ``turn_id`` is the new turn's on import)."""

    type: EventType
    seq: Position
    ts: Annotated[float, Field(strict=True, allow_inf_nan=False)]
    span_id: Annotated[str, Field(strict=True, max_length=MAX_SPAN_ID)]
    parent_span_id: Annotated[str, Field(strict=True, max_length=MAX_SPAN_ID)] | None = None
    data: Annotated[Object, Field(validate_default=True)] = {}

    @field_validator("type")
    @classmethod
    def _stored_kind(cls, value: EventType) -> EventType:
        if value is EventType.HEARTBEAT:
            raise _refuse("a heartbeat is never stored")
        return value

    @field_validator("data")
    @classmethod
    def _protocol_data(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """The data must be its event type's payload, as every reader of the stored turn parses it."""
        kind = info.data.get("type")
        if isinstance(kind, EventType):
            try:
                parsed_payload(kind, value)
            except EventDataError as exc:
                raise _refuse(str(exc)) from None
        return value


def validated(model: type[Model], raw: object, where: str, context: Mapping[str, Any] | None = None) -> Model:
    """``raw`` as ``model``; raises :class:`ArchiveFieldInvalid` naming the first field it refuses
    (``where`` goes in front: ``events/1.jsonl[3]``)."""
    try:
        return model.model_validate(raw, context=dict(context or {}))
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = where + "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in first["loc"])
        got = first.get("input")
        shown = (
            f" (got {got!r:.80})"
            if isinstance(got, str | int | float | bool) and first["type"] != "archive_field"
            else ""
        )
        more = f"; {exc.error_count() - 1} more field(s) refused too" if exc.error_count() > 1 else ""
        raise ArchiveFieldInvalid(
            f"the archive's {field.lstrip('.') or 'manifest'}: {first['msg']}{shown}{more}"
        ) from None
