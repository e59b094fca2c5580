from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated

from fastapi import APIRouter, File, Path, Request, Response

from fleet_rlm.api.deps import Files
from fleet_rlm.api.downloads import (
    CONTENT_RANGE_DOC,
    IF_NONE_MATCH_HEADER_DOC,
    IF_RANGE_HEADER_DOC,
    NO_SCRIPT_HEADERS_DOC,
    RANGE_HEADER_DOC,
    UNSATISFIED_RANGE_DOC,
    StoredFileResponse,
    none_match,
    requested_range,
)
from fleet_rlm.api.errors import CONNECTION_CLOSE, FILE_DAMAGED, ApiError, ErrorBody, Responses
from fleet_rlm.api.schemas import FileList, FileOut, FileUpload
from fleet_rlm.api.text import control_character

router = APIRouter(tags=["files"])
BAD_PATH: Responses = {
    400: {
        "model": ErrorBody,
        "description": "invalid_path: the path is absolute, has '..' or is otherwise refused",
    }
}
NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "No such session or file"}}
FILE_BYTES = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
"""A stored file is served with its own media type (``media_type`` in its listing)."""
StoredPath = Annotated[
    str,
    Path(
        description="The file's path in the session: under files/, artifacts/ or memory/ (else 400 invalid_path)",
        examples=["files/sales.csv"],
        # Documented only: the service checks it and answers 400 invalid_path, not FastAPI's 422.
        json_schema_extra={"pattern": "^(files|artifacts|memory)/."},
    ),
]
ETAG = {"ETag": {"schema": {"type": "string"}, "description": "The file's sha256, quoted"}}


@router.post(
    "/sessions/{session}/files",
    status_code=201,
    response_model=FileOut,
    form_limits={"max_files": 1, "max_fields": 4},
    responses={
        400: {
            "model": ErrorBody,
            "description": "invalid_path: the path is absolute, has '..' or is otherwise refused; or "
            "malformed_body: not a readable multipart form",
        },
        **NOT_FOUND,
        409: {
            "model": ErrorBody,
            "description": "upload_conflict: the session changed while the file was being stored; send it again",
        },
        413: {
            "model": ErrorBody,
            "description": "Larger than FLEET_UPLOAD_LIMIT_MB (upload_too_large; Connection: close)",
            "headers": CONNECTION_CLOSE,
        },
        422: {
            "model": ErrorBody,
            "description": "invalid_request: no 'file' part, no name to store it under, or a path with a control "
            "character or a NUL (the message names the field)",
        },
    },
)
async def upload_file(session: str, form: Annotated[FileUpload, File()], files: Files) -> FileOut:
    """Upload one file (multipart field ``file``) into the session's ``files/``; replaces a file at the same path.
    The body is cut off at the upload limit while it streams in (:mod:`fleet_rlm.api.body_limits`)."""
    field, destination = ("path", form.path) if form.path else ("file", form.file.filename or "")
    if not destination:
        raise ApiError(422, "invalid_request", "give the file a name or a 'path' field")
    char = control_character(destination)
    if char is not None:
        where = "path" if field == "path" else "file (its file name)"
        raise ApiError(
            422,
            "invalid_request",
            f"{where}: {destination!r} holds the control character U+{ord(char):04X}; file paths cannot hold "
            "control characters",
        )
    upload = form.file
    record, kind = await files.upload(session, destination, upload.file, declared_type=upload.content_type)
    return FileOut.of(record, str(kind))


@router.get("/sessions/{session}/files", response_model=FileList, responses={**NOT_FOUND, **FILE_DAMAGED})
async def list_files(session: str, files: Files) -> FileList:
    """Uploads, artifacts and memory files of the session."""
    return FileList(items=[FileOut.of(record, str(kind)) for record, kind in await files.in_session(session)])


@router.get(
    "/sessions/{session}/files/{path:path}",
    status_code=200,
    response_class=StoredFileResponse,
    responses={
        **BAD_PATH,
        **NOT_FOUND,
        **FILE_DAMAGED,
        200: {
            "content": FILE_BYTES,
            "description": "The file's bytes, with its media type",
            "headers": {**ETAG, **NO_SCRIPT_HEADERS_DOC},
        },
        206: {
            "content": FILE_BYTES,
            "description": "The one byte range asked for in Range",
            "headers": {**ETAG, **CONTENT_RANGE_DOC, **NO_SCRIPT_HEADERS_DOC},
        },
        304: {"description": "If-None-Match names the file's ETag: the client's copy is current", "headers": ETAG},
        416: {
            "model": ErrorBody,
            "description": "range_not_satisfiable: the Range starts past the end of the file",
            "headers": UNSATISFIED_RANGE_DOC,
        },
    },
    openapi_extra={"parameters": [RANGE_HEADER_DOC, IF_RANGE_HEADER_DOC, IF_NONE_MATCH_HEADER_DOC]},
)
async def download_file(session: str, path: StoredPath, request: Request, files: Files) -> Response:
    """The file's bytes; ``ETag`` is its sha256 (``If-None-Match`` gives 304); one byte range on request."""
    record, blob = await files.download(session, path)
    etag = f'"{record.sha256}"'
    if none_match(request.headers, etag):
        return Response(status_code=304, headers={"ETag": etag})
    return StoredFileResponse(
        blob,
        byte_range=requested_range(request.headers, record.size, etag),
        media_type=record.media_type,
        filename=PurePosixPath(record.path).name,
        headers={"ETag": etag},
    )


@router.delete("/sessions/{session}/files/{path:path}", status_code=204, responses={**BAD_PATH, **NOT_FOUND})
async def delete_file(session: str, path: StoredPath, files: Files) -> Response:
    await files.delete(session, path)
    return Response(status_code=204)
