"""The service moves a session's files and the approved memory into a turn's workspace and its results
out only through the backend's push/pull seam, with the backend chosen by ``sandbox_backend``."""

from __future__ import annotations

import io

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.sandbox import registry
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.store import Database
from fleet_rlm.testing.backends import SeamRecordingBackend
from fleet_rlm.testing.settings import SettingsFactory

pytestmark = pytest.mark.anyio

WRITE = (
    "import os\nrows = open('files/data/sales.csv').read().splitlines()\n"
    "open('artifacts/count.txt', 'w').write(str(len(rows)))\nopen('memory/seen.md', 'w').write('sales')\n"
    "os.symlink('/etc/passwd', 'artifacts/passwd')\nSUBMIT(answer=str(len(rows)) + open('memory/MEMORIES.md').read())"
)


async def test_files_cross_into_and_out_of_the_sandbox_through_the_configured_backends_seam(
    make_settings: SettingsFactory, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(registry.BACKENDS, "local-recording", lambda: SeamRecordingBackend)
    settings = make_settings(sandbox_backend="local-recording")
    service = FleetService(settings, database=Database(str(settings.database_url)))
    await service.start()
    try:
        await service.sessions.create(name="s")
        await service.files.upload("s", "data/sales.csv", io.BytesIO(b"a\nb\nc\n"))
        entry, _ = await service.parts.store.propose_memory(
            "rows are lines", "", session_id=None, turn_id=None, max_pending=9
        )
        await service.memory.approve(entry.id)
        model_server.script("root", rlm_step("Count.", WRITE))
        turn, _ = await service.turns.submit("s", TurnSubmission(message="count"))
        done = await service.turns.wait(turn.id)
        assert done.status == "completed", done.error
        assert done.answer is not None and done.answer.startswith("3# Memory") and "- rows are lines" in done.answer

        backend = service.kernels.backend
        assert isinstance(backend, SeamRecordingBackend)
        assert backend.seam.pushed == ["files/data/sales.csv", "memory/MEMORIES.md"]
        # Never the link, nor memory/ (reviewed only); the kernel's snapshot crosses the same seam.
        assert backend.seam.pulled == ["artifacts/count.txt", ".kernel/snapshot.pickle"]
        files = {record.path for record, _ in await service.files.in_session("s")}
        assert files == {"files/data/sales.csv", "artifacts/count.txt"}
        _, blob = await service.files.download("s", "artifacts/count.txt")
        assert blob.read_bytes() == b"3"
    finally:
        await service.stop()
