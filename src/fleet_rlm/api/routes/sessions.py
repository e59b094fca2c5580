from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, NoReturn

from fastapi import APIRouter, File, HTTPException, Query, Response
from starlette.background import BackgroundTask

from fleet_rlm.api.deps import Archives, Service, Sessions
from fleet_rlm.api.downloads import StoredFileResponse
from fleet_rlm.api.errors import CONNECTION_CLOSE, FILE_DAMAGED, ErrorBody, Responses
from fleet_rlm.api.schemas import MAX_INT32, ArchiveUpload, SessionCreate, SessionOut, SessionPage, SessionPatch

router = APIRouter(tags=["sessions"])
NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "No such session"}}
BAD_NAME: Responses = {
    400: {"model": ErrorBody, "description": "invalid_session_name, or malformed_json: the body is not valid JSON"}
}
NAME_TAKEN: Responses = {409: {"model": ErrorBody, "description": "session_name_taken"}}


@router.api_route("/sessions/import", methods=["GET", "PATCH", "DELETE"], include_in_schema=False, response_model=None)
async def import_is_not_a_session() -> NoReturn:
    """``/sessions/import`` is the import route (POST), not a session named "import" (no session may
    take that name), as OpenAPI matches a concrete path before ``/sessions/{session}``."""
    raise HTTPException(405)


@router.post("/sessions", status_code=201, response_model=SessionOut, responses={**BAD_NAME, **NAME_TAKEN})
async def create_session(body: SessionCreate, sessions: Sessions) -> SessionOut:
    record = await sessions.create(name=body.name, title=body.title, mode=body.mode, settings=body.settings)
    return SessionOut.of(record)


@router.get("/sessions", response_model=SessionPage)
async def list_sessions(
    sessions: Sessions,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_INT32)] = 0,
) -> SessionPage:
    """Sessions, most recently active first."""
    records = await sessions.recent(limit=limit + 1, offset=offset)
    more = len(records) > limit
    return SessionPage(items=[SessionOut.of(r) for r in records[:limit]], next_offset=offset + limit if more else None)


@router.get("/sessions/{session}", response_model=SessionOut, responses=NOT_FOUND)
async def get_session(session: str, sessions: Sessions) -> SessionOut:
    """``session`` is the id or the unique name."""
    return SessionOut.of(await sessions.get(session))


@router.patch("/sessions/{session}", response_model=SessionOut, responses={**BAD_NAME, **NOT_FOUND, **NAME_TAKEN})
async def update_session(session: str, body: SessionPatch, sessions: Sessions) -> SessionOut:
    """Change only the fields given."""
    changes = body.model_dump(exclude_unset=True)
    return SessionOut.of(await sessions.update(session, **changes))


@router.delete(
    "/sessions/{session}",
    status_code=204,
    responses={**NOT_FOUND, 409: {"model": ErrorBody, "description": "session_busy: one of its turns is running"}},
)
async def delete_session(session: str, sessions: Sessions) -> Response:
    """Delete the session with its turns, events and files (409 while a turn runs)."""
    await sessions.delete(session)
    return Response(status_code=204)


@router.get(
    "/sessions/{session}/export",
    status_code=200,
    response_class=StoredFileResponse,
    responses={
        **NOT_FOUND,
        **FILE_DAMAGED,
        200: {
            "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
            "description": "The session archive (made for this request, so Range is not served)",
        },
    },
)
async def export_session(session: str, service: Service) -> StoredFileResponse:
    """One portable archive of the session: history with events, files, artifacts and memory."""
    scratch = service.settings.data_dir / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(dir=scratch, suffix=".tar.gz", delete=False)  # noqa: SIM115
    path = Path(handle.name)
    try:
        with handle:
            record = await service.archives.export(session, handle)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return StoredFileResponse(
        path,
        byte_range=None,
        media_type="application/gzip",
        filename=f"{record.name or record.id}.fleet.tar.gz",
        background=BackgroundTask(path.unlink, missing_ok=True),
    )


@router.post(
    "/sessions/import",
    status_code=201,
    response_model=SessionOut,
    form_limits={"max_files": 1, "max_fields": 4},
    responses={
        400: {
            "model": ErrorBody,
            "description": "invalid_archive: not a valid session archive; invalid_session_name; or malformed_body: "
            "not a readable multipart form",
        },
        **NAME_TAKEN,
        413: {
            "model": ErrorBody,
            "description": "archive_too_large: past FLEET_IMPORT_LIMIT_MB as sent, or unpacking past "
            "FLEET_IMPORT_UNPACKED_LIMIT_MB, FLEET_IMPORT_FILE_LIMIT_MB or FLEET_IMPORT_MAX_ENTRIES",
            "headers": CONNECTION_CLOSE,
        },
        422: {
            "model": ErrorBody,
            "description": "invalid_request: no 'archive' part or a NUL in 'name'; invalid_archive_field: a field "
            "of the archive breaks its rule (the message names it, e.g. events/1.jsonl[3].seq); invalid_settings: "
            "settings in the archive this server refuses",
        },
    },
)
async def import_session(form: Annotated[ArchiveUpload, File()], archives: Archives) -> SessionOut:
    """Restore an exported archive (multipart field ``archive``) as a new session with a new id.
    The archive is read as a stream with bounded size, entries and unpacked bytes."""
    return SessionOut.of(await archives.restore(form.archive.file, name=form.name or None))
