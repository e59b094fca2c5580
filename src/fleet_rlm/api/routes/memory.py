"""Reviewing memory: what turns proposed with ``remember``, and the person's decisions (docs/memory.md).

One memory serves every session of the server; each entry names the session and turn it came from.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from fleet_rlm.api.deps import Memory
from fleet_rlm.api.errors import ErrorBody, Responses
from fleet_rlm.api.schemas import MAX_INT32, MemoryApproval, MemoryOut, MemoryPage, MemoryStatus
from fleet_rlm.api.text import Text

router = APIRouter(tags=["memory"])
NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "No such memory entry (memory_not_found)"}}
BAD_TEXT: Responses = {
    422: {
        "model": ErrorBody,
        "description": "The text is empty, longer than memory.max_entry_chars, or holds a control character "
        "other than a line break or tab (invalid_memory_text)",
    }
}


@router.get(
    "/memory", response_model=MemoryPage, responses={404: {"model": ErrorBody, "description": "No such session"}}
)
async def list_memory(
    memory: Memory,
    status: MemoryStatus | None = None,
    session: Annotated[Text | None, Query(description="Only entries proposed in this session (id or name)")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_INT32)] = 0,
) -> MemoryPage:
    """Memory entries, oldest proposal first: ``?status=pending`` is what waits for review."""
    records = await memory.entries(status=status, session=session, limit=limit + 1, offset=offset)
    more = len(records) > limit
    return MemoryPage(items=[MemoryOut.of(r) for r in records[:limit]], next_offset=offset + limit if more else None)


@router.get("/memory/{entry_id}", response_model=MemoryOut, responses=NOT_FOUND)
async def get_memory(entry_id: str, memory: Memory) -> MemoryOut:
    return MemoryOut.of(await memory.get(entry_id))


@router.post("/memory/{entry_id}/approve", response_model=MemoryOut, responses={**NOT_FOUND, **BAD_TEXT})
async def approve_memory(entry_id: str, memory: Memory, body: MemoryApproval | None = None) -> MemoryOut:
    """Approve the entry, with ``text`` in place of the proposed one to edit it; later turns are shown it.
    Approving an approved entry again edits it; a rejected one can be approved after all."""
    text = body.text if body is not None else None
    return MemoryOut.of(await memory.approve(entry_id, text))


@router.post("/memory/{entry_id}/reject", response_model=MemoryOut, responses=NOT_FOUND)
async def reject_memory(entry_id: str, memory: Memory) -> MemoryOut:
    """Reject the entry: turns never see it, and a turn proposing the same text again is told so."""
    return MemoryOut.of(await memory.reject(entry_id))


@router.delete("/memory/{entry_id}", status_code=204, responses=NOT_FOUND)
async def delete_memory(entry_id: str, memory: Memory) -> Response:
    """Forget the entry entirely (a turn may propose the same text again)."""
    await memory.delete(entry_id)
    return Response(status_code=204)
