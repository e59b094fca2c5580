"""A session deleted while an upload to it is being stored: the upload gets 404 (never a server
error), and nothing of it is left on disk. The upload is held at a gate at two points (its bytes
half copied into the blob store; its bytes stored but not yet recorded) while the delete runs."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest

from fleet_rlm.service.service import FleetService
from fleet_rlm.testing.faults import Gate, GatedReader
from fleet_rlm.testing.settings import SettingsFactory

from .server import server_in_thread


def hold_while_copying(service: FleetService, gate: Gate) -> None:
    copy = service.parts.blobs.put_stream

    def held(session_id: str, source: Any, limit: int | None = None) -> tuple[str, int]:
        return copy(session_id, GatedReader(source, gate), limit)

    service.parts.blobs.put_stream = held  # type: ignore[method-assign]


def hold_before_recording(service: FleetService, gate: Gate) -> None:
    record = service.parts.store.put_file

    async def held(*args: Any) -> Any:
        await asyncio.to_thread(gate.hold)
        return await record(*args)

    service.parts.store.put_file = held  # type: ignore[method-assign]


@pytest.mark.parametrize("hold", [hold_while_copying, hold_before_recording])
def test_deleting_a_session_during_an_upload_gives_the_upload_404(make_settings: SettingsFactory, hold: Any) -> None:
    settings = make_settings(sandbox_pool_size=0)
    service = FleetService(settings)
    gate = Gate()
    hold(service, gate)
    with server_in_thread(settings, service) as server, server.http() as http:
        session = http.post("/sessions", json={"name": "s"}).json()["id"]
        answers: list[httpx.Response] = []

        def upload() -> None:
            with server.http() as uploader:
                answers.append(uploader.post("/sessions/s/files", files={"file": ("big.bin", b"x" * 3_000_000)}))

        uploading = threading.Thread(target=upload)
        uploading.start()
        gate.wait_reached()
        assert http.delete("/sessions/s").status_code == 204
        gate.release()
        uploading.join(timeout=60)

        [answer] = answers
        assert answer.status_code == 404, answer.text
        assert answer.json()["code"] == "session_not_found"
        assert http.get(f"/sessions/{session}").status_code == 404
        assert not (settings.data_dir / "sessions" / session).exists()
        assert http.get("/health").status_code == 200
