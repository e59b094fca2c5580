from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated

from fastapi import APIRouter, File, Request, Response
from fastapi.responses import FileResponse

from fleet_rlm.api.deps import Service
from fleet_rlm.api.errors import CONNECTION_CLOSE, ApiError, ErrorBody, Responses
from fleet_rlm.api.schemas import FileList, FileOut, FileUpload

router = APIRouter(tags=["files"])
BAD_PATH: Responses = {
    400: {"model": ErrorBody, "description": "The path is absolute, has '..' or is otherwise refused"}
}
NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "No such session or file"}}


@router.post(
    "/sessions/{session}/files",
    status_code=201,
    response_model=FileOut,
    form_limits={"max_files": 1, "max_fields": 4},
    responses={
        **BAD_PATH,
        **NOT_FOUND,
        413: {
            "model": ErrorBody,
            "description": "Larger than FLEET_UPLOAD_LIMIT_MB (upload_too_large; Connection: close)",
            "headers": CONNECTION_CLOSE,
        },
    },
)
async def upload_file(session: str, form: Annotated[FileUpload, File()], service: Service) -> FileOut:
    """Upload one file (multipart field ``file``) into the session's ``files/``; replaces a file at the same path.
    The body is cut off at the upload limit while it streams in (:mod:`fleet_rlm.api.body_limits`)."""
    destination = form.path or form.file.filename
    if not destination:
        raise ApiError(422, "invalid_request", "give the file a name or a 'path' field")
    upload = form.file
    record, kind = await service.upload_file(session, destination, upload.file, declared_type=upload.content_type)
    return FileOut.of(record, str(kind))


@router.get("/sessions/{session}/files", response_model=FileList, responses=NOT_FOUND)
async def list_files(session: str, service: Service) -> FileList:
    """Uploads, artifacts and memory files of the session."""
    return FileList(items=[FileOut.of(record, str(kind)) for record, kind in await service.list_files(session)])


@router.get(
    "/sessions/{session}/files/{path:path}",
    response_class=FileResponse,
    responses={**BAD_PATH, **NOT_FOUND, 200: {"content": {"application/octet-stream": {}}}},
)
async def download_file(session: str, path: str, request: Request, service: Service) -> Response:
    """The file's bytes; ``ETag`` is its sha256 (``If-None-Match`` gives 304)."""
    record, blob = await service.file_for_download(session, path)
    etag = f'"{record.sha256}"'
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers={"ETag": etag})
    return FileResponse(
        blob, media_type=record.media_type, filename=PurePosixPath(record.path).name, headers={"ETag": etag}
    )


@router.delete("/sessions/{session}/files/{path:path}", status_code=204, responses={**BAD_PATH, **NOT_FOUND})
async def delete_file(session: str, path: str, service: Service) -> Response:
    await service.delete_file(session, path)
    return Response(status_code=204)
