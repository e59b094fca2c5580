"""Fleet as an MCP server, on the official ``mcp`` SDK (2.x, ``MCPServer``): docs/integrations.md.

The same server is reached two ways: ``fleet mcp`` over stdio (an MCP host starts it as a
subprocess; it runs its own :class:`FleetService` on the local database) and ``/mcp`` on
``fleet serve`` over streamable HTTP, behind the server's token and rules. Tools reach Fleet only
through the service; every path a client names is cleaned by it (no ``..``, nothing outside
``files/``, ``artifacts/``, ``memory/``) and file bytes come from the blob store, never from a
sandbox's tree.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import logging
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from pydantic import BaseModel, Field

from fleet_rlm import __version__
from fleet_rlm.api.text import control_character
from fleet_rlm.protocol.events import EventType
from fleet_rlm.protocol.routes import Mode
from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.store import FileRecord, SessionRecord, StoreError, TooLarge

MAX_READ_BYTES = 8 * 1024 * 1024
"""The largest file ``read_file`` returns inline (base64 grows it by a third); larger ones are
downloaded from ``GET /api/v1/sessions/{session}/files/{path}``."""
MAX_TRACE_EVENTS = 5000
INSTRUCTIONS = (
    "Fleet runs tasks with a recursive language model that writes Python in an isolated sandbox. "
    "Upload inputs with upload_file (they land under files/), run_task with the task (and the files "
    "to focus on), then read_file the artifacts it lists."
)
FILE_URI = "fleet://sessions/{session}/{+path}"


class Artifact(BaseModel):
    path: str = Field(description="e.g. artifacts/revenue.csv; read it with read_file")
    size: int


class TaskResult(BaseModel):
    answer: str
    status: str = Field(description="completed, or incomplete when the budget ran out without a result")
    unverified: bool = Field(description="True when the answer was not checked by running code")
    session: str = Field(description="The session's id: pass it to read_file, upload_file, run_task")
    turn_id: str = Field(description="Pass it to get_trace")
    artifacts: list[Artifact]
    usage: dict[str, Any]


class SessionInfo(BaseModel):
    id: str
    name: str | None
    title: str | None
    updated_at: str


class StoredFile(BaseModel):
    path: str
    size: int
    sha256: str
    media_type: str


class FileContent(StoredFile):
    text: str | None = Field(None, description="The content, when it is UTF-8 text")
    content_base64: str | None = Field(None, description="The content, base64-encoded, when it is not text")


def _refused(exc: StoreError | TooLarge) -> ToolError:
    if isinstance(exc, TooLarge):
        return ToolError(f"upload_too_large: the file is {exc}")
    return ToolError(f"{exc.code}: {exc.message}")


def _stored(record: FileRecord) -> StoredFile:
    return StoredFile(path=record.path, size=record.size, sha256=record.sha256, media_type=record.media_type)


class FleetTools:
    """The tools and resources, over one service."""

    def __init__(self, service: FleetService) -> None:
        self.service = service

    async def _session_for(self, session: str | None, task: str) -> SessionRecord:
        if session:
            return await self.service.sessions.open(session)
        return await self.service.sessions.create(title=f"MCP: {task[:80]}")

    async def run_task(
        self,
        task: str,
        ctx: Context,
        files: list[str] | None = None,
        session: str | None = None,
        mode: Mode | None = None,
    ) -> TaskResult:
        """Run a task as one turn and return its answer and the artifacts it wrote. ``files``: paths in
        the session's workspace to focus on (e.g. files/sales.csv, uploaded with upload_file).
        ``session``: a session id or name (created if new) whose files and history the turn gets;
        without one, a new session. ``mode``: rlm (code), flex, direct or hybrid (triage picks)."""
        try:
            record = await self._session_for(session, task)
            submission = TurnSubmission(message=task, context_paths=list(files or []), mode=mode)
            turn, _ = await self.service.turns.submit(record.id, submission)
        except StoreError as exc:
            raise _refused(exc) from exc
        try:
            async for event in await self.service.turns.events(turn.id):
                if event.type is EventType.ITERATION_STARTED:
                    iteration = int(event.data.get("iteration", 0))
                    total = event.data.get("max_iterations")
                    await ctx.report_progress(iteration, total, f"iteration {iteration}")
        except asyncio.CancelledError:
            self.service.turns.abandon(turn.id)
            raise
        ended = await self.service.turns.get(turn.id)
        if ended.status not in (TurnStatus.COMPLETED, TurnStatus.INCOMPLETE):
            raise ToolError(f"turn {ended.id} {ended.status}: {ended.error or 'no answer'}")
        return TaskResult(
            answer=ended.answer or "",
            status=str(ended.status),
            unverified=ended.unverified,
            session=record.id,
            turn_id=ended.id,
            artifacts=[Artifact(path=a["path"], size=int(a.get("size", 0))) for a in ended.artifacts],
            usage=ended.usage,
        )

    async def list_sessions(self, limit: int = 50) -> list[SessionInfo]:
        """Sessions, most recently active first (at most 200)."""
        records = await self.service.sessions.recent(limit=max(1, min(limit, 200)))
        return [SessionInfo(id=r.id, name=r.name, title=r.title, updated_at=r.updated_at.isoformat()) for r in records]

    async def read_file(self, session: str, path: str) -> FileContent:
        """A session's file: files/..., artifacts/... or memory/... (text as text, else base64)."""
        try:
            record, blob = await self.service.files.download(session, path)
        except StoreError as exc:
            raise _refused(exc) from exc
        if record.size > MAX_READ_BYTES:
            raise ToolError(
                f"file_too_large: {record.path} is {record.size} bytes, more than {MAX_READ_BYTES} returned inline; "
                f"download it from GET /api/v1/sessions/{session}/files/{record.path}"
            )
        content = await asyncio.to_thread(blob.read_bytes)
        try:
            return FileContent(**_stored(record).model_dump(), text=content.decode("utf-8"))
        except UnicodeDecodeError:
            return FileContent(**_stored(record).model_dump(), content_base64=base64.b64encode(content).decode())

    async def upload_file(self, session: str, path: str, content_base64: str) -> StoredFile:
        """Store a file in a session (created if the name is new) at files/<path>, replacing any there."""
        control = control_character(path)
        if control is not None:  # as the HTTP API: such a file could not be named in a URL
            raise ToolError(f"invalid_path: the path holds the control character {control!r}")
        limit = self.service.settings.server.upload_limit_mb * 1024 * 1024
        if len(content_base64) > (limit // 3 + 1) * 4:
            raise ToolError(f"upload_too_large: the file is larger than the limit of {limit} bytes")
        try:
            content = base64.b64decode(content_base64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ToolError(f"invalid_base64: content_base64 is not base64 ({exc})") from exc
        if len(content) > limit:
            raise ToolError(f"upload_too_large: the file is larger than the limit of {limit} bytes")
        try:
            record = await self.service.sessions.open(session)
            stored, _ = await self.service.files.upload(record.id, path, io.BytesIO(content))
        except (StoreError, TooLarge) as exc:
            raise _refused(exc) from exc
        return _stored(stored)

    async def get_trace(self, turn_id: str) -> dict[str, Any]:
        """A turn and what it did: its status, answer and usage, and its events in order (the span
        tree: each event's span_id and parent_span_id), as far as it has run."""
        try:
            turn = await self.service.turns.get(turn_id)
            events = await self.service.turns.stored_events(turn_id, limit=MAX_TRACE_EVENTS)
        except StoreError as exc:
            raise _refused(exc) from exc
        return {
            "turn": {
                "id": turn.id,
                "session_id": turn.session_id,
                "status": str(turn.status),
                "message": turn.message,
                "answer": turn.answer,
                "error": turn.error,
                "usage": turn.usage,
            },
            "events": [event.to_dict() for event in events],
            "truncated": len(events) >= MAX_TRACE_EVENTS,
        }

    async def session_file(self, session: str, path: str) -> str | bytes:
        try:
            record, blob = await self.service.files.download(session, path)
        except StoreError as exc:
            raise ResourceError(f"{exc.code}: {exc.message}") from exc
        if record.size > MAX_READ_BYTES:
            raise ResourceError(f"file_too_large: {record.path} is {record.size} bytes")
        content = await asyncio.to_thread(blob.read_bytes)
        try:
            return content.decode("utf-8")
        except UnicodeDecodeError:
            return content


def build_mcp_server(service: FleetService) -> MCPServer:
    tools = FleetTools(service)
    # The SDK configures the root logger when a server is made (logging.basicConfig with a rich
    # handler); Fleet's logging is set up by its commands, so it is put back as it was.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    server: MCPServer = MCPServer(name="fleet-rlm", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    root.handlers[:] = handlers
    root.setLevel(level)
    server.tool()(tools.run_task)
    server.tool()(tools.list_sessions)
    server.tool()(tools.read_file)
    server.tool()(tools.upload_file)
    server.tool()(tools.get_trace)
    server.resource(FILE_URI, name="session_file", description="A session's file, e.g. files/x.csv")(tools.session_file)
    return server
