from __future__ import annotations

import io
import tarfile

import pytest

from fleet_rlm.service.service import FleetService, TurnSubmission
from fleet_rlm.store import Conflict, Invalid
from fleet_rlm.testing.scripted_model import ScriptedModelServer, rlm_step

pytestmark = pytest.mark.anyio


async def run_turn(service: FleetService, model_server: ScriptedModelServer) -> str:
    await service.create_session(name="orig", title="Original", settings={"max_iterations": 5})
    await service.upload_file("orig", "in.csv", io.BytesIO(b"a,b\n1,2\n"))
    code = "open('artifacts/out.txt','w').write('result')\nopen('memory/m.md','w').write('remember')\nSUBMIT(answer='made it')"
    model_server.script("root", rlm_step("Make.", code))
    turn, _ = await service.submit_turn("orig", TurnSubmission(message="make things"))
    assert (await service.wait_for_turn(turn.id)).status == "completed"
    return turn.id


async def test_export_then_import_restores_history_events_and_files_under_new_ids(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    turn_id = await run_turn(service, model_server)
    archive = io.BytesIO()
    await service.export_session("orig", archive)

    with pytest.raises(Conflict):
        await service.import_session(io.BytesIO(archive.getvalue()))
    copy = await service.import_session(io.BytesIO(archive.getvalue()), name="copy")
    original = await service.store.get_session("orig")
    assert copy.id != original.id and copy.title == "Original" and copy.settings == {"max_iterations": 5}

    [old_turn] = await service.list_turns("orig")
    [new_turn] = await service.list_turns("copy")
    assert new_turn.id != turn_id
    assert (new_turn.message, new_turn.answer, new_turn.status) == ("make things", "made it", "completed")
    old_events = await service.store.events_after(old_turn.id)
    new_events = await service.store.events_after(new_turn.id)
    assert [{**e.to_dict(), "turn_id": ""} for e in new_events] == [{**e.to_dict(), "turn_id": ""} for e in old_events]

    def listing(files: list) -> list[tuple[str, str, str]]:
        return [(r.path, r.sha256, r.origin) for r, _ in files]

    assert listing(await service.list_files("copy")) == listing(await service.list_files("orig"))
    _, blob = await service.file_for_download("copy", "artifacts/out.txt")
    assert blob.read_bytes() == b"result"

    model_server.script("root", rlm_step("Read memory.", "SUBMIT(answer=open('memory/m.md').read())"))
    follow_up, _ = await service.submit_turn("copy", TurnSubmission(message="what do you remember?"))
    assert (await service.wait_for_turn(follow_up.id)).answer == "remember"


async def test_a_tampered_or_foreign_archive_is_refused_and_leaves_nothing(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    await run_turn(service, model_server)
    archive = io.BytesIO()
    await service.export_session("orig", archive)
    archive.seek(0)
    tampered = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="r:gz") as source, tarfile.open(fileobj=tampered, mode="w:gz") as out:
        for member in source:
            data = source.extractfile(member).read()  # type: ignore[union-attr]
            if member.name.startswith("blobs/") and data == b"result":
                data = b"forged"
                member.size = len(data)
            out.addfile(member, io.BytesIO(data))
    sessions_before = len(await service.store.list_sessions())
    with pytest.raises(Invalid) as forged:
        await service.import_session(io.BytesIO(tampered.getvalue()), name="forged")
    assert forged.value.code == "invalid_archive" and "artifacts/out.txt" in forged.value.message
    with pytest.raises(Invalid) as junk:
        await service.import_session(io.BytesIO(b"not a tarball"), name="junk")
    assert junk.value.code == "invalid_archive"
    assert len(await service.store.list_sessions()) == sessions_before
    assert service.blobs.session_ids() == {s.id for s in await service.store.list_sessions()}
