"""Replay capture and replays, through real turns (real sandboxes, scripted model, SQLite and
PostgreSQL): a captured turn keeps an immutable snapshot of its inputs; a replay runs it again in a
fresh runtime from that snapshot alone; a turn run without capture cannot be labeled, and says why."""

from __future__ import annotations

import hashlib
import io

import pytest

from fleet_rlm.engine.identity import config_identity, program_identity
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.quality.labels import label_turn
from fleet_rlm.quality.replay import ReplayUnavailable, replay
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.replays import ReplaySnapshot
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.store import Conflict, Database, Invalid, NotFound
from fleet_rlm.testing.settings import SettingsFactory

from .conftest import SALES, TOTAL_CODE, captured_turn

pytestmark = pytest.mark.anyio


async def test_a_captured_turn_keeps_a_snapshot_of_its_inputs(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    first = await captured_turn(service, model_server, "sales")
    await service.sessions.update("sales", settings={"capture_replays": True, "max_iterations": 7})
    second = await captured_turn(
        service, model_server, "sales", message="And again?", code="SUBMIT(answer=open('files/sales.csv').read())"
    )
    snapshot = ReplaySnapshot.model_validate((await service.parts.store.get_replay(second.id)).snapshot)
    assert snapshot.task == "And again?"
    assert [(h.message, h.answer) for h in snapshot.history] == [(first.message, first.answer)]
    files = {f.path: f.sha256 for f in snapshot.files}
    assert files["files/sales.csv"] == hashlib.sha256(SALES).hexdigest()
    assert files["artifacts/total.txt"] == hashlib.sha256(b"total=250\n").hexdigest()  # the first turn's
    assert snapshot.mode == "rlm"
    assert snapshot.budgets == {"max_iterations": 7, "max_model_calls": 60, "turn_timeout": 60.0}
    assert snapshot.program == program_identity()
    assert snapshot.config == config_identity(service.settings.with_values({"max_iterations": 7}))
    assert "api_key" not in str(snapshot.model_dump()) and "scripted" not in str(snapshot.config)
    assert snapshot.dependencies["dspy"] == "3.4.1"
    with pytest.raises(Conflict, match="already has a replay snapshot"):  # immutable: never replaced
        await service.parts.store.save_replay(second.id, second.session_id, {"task": "changed"})


async def test_a_turn_is_not_captured_unless_the_session_or_server_asks(
    service: FleetService, model_server: ScriptedModelServer, make_settings: SettingsFactory
) -> None:
    plain = await captured_turn(service, model_server, "plain", capture=False)
    with pytest.raises(NotFound):
        await service.parts.store.get_replay(plain.id)
    with pytest.raises(Invalid, match="ran without capture_replays, so its inputs were not kept") as refused:
        await label_turn(service, plain.id, answer="250")
    assert refused.value.code == "turn_not_captured" and "FLEET_CAPTURE_REPLAYS" in refused.value.message

    settings = make_settings(capture_replays=True)
    server_wide = FleetService(settings, database=Database(str(settings.database_url)))
    await server_wide.start()
    try:
        await server_wide.sessions.create(name="everywhere")
        model_server.script("root", rlm_step("Answer.", "SUBMIT(answer='42')"))
        turn, _ = await server_wide.turns.submit("everywhere", TurnSubmission(message="the answer?"))
        await server_wide.turns.wait(turn.id)
    finally:
        await server_wide.stop()
    assert (await service.parts.store.get_replay(turn.id)).snapshot["task"] == "the answer?"


async def test_a_replay_runs_in_a_fresh_runtime_from_the_snapshot_alone(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    turn = await captured_turn(service, model_server, "sales")
    snapshot = ReplaySnapshot.model_validate((await service.parts.store.get_replay(turn.id)).snapshot)
    # The session moves on: its file changes and is then deleted from the session; the replay sees the
    # file as the turn saw it, and none of the replay's work reaches the session.
    await service.files.upload("sales", "sales.csv", io.BytesIO(b"region,revenue\nnorth,1\n"))
    await service.files.delete("sales", "artifacts/total.txt")
    model_server.script("root", rlm_step("Sum it.", TOTAL_CODE))
    result = await replay(service, snapshot)
    assert result.outcome.status == "completed", result.outcome.error
    assert result.answer == "The total revenue is 250."
    assert result.artifacts == {"artifacts/total.txt": "total=250\n"}
    assert result.usage["model_calls"] == 1 and result.usage["input_tokens"] > 0
    turns = await service.turns.in_session("sales")
    assert [t.id for t in turns] == [turn.id]  # a replay is not a turn of the session
    files = {r.path for r, _ in await service.files.in_session("sales")}
    assert "artifacts/total.txt" not in files


async def test_a_replay_whose_input_bytes_are_gone_says_which_file(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    turn = await captured_turn(service, model_server, "sales")
    snapshot = ReplaySnapshot.model_validate((await service.parts.store.get_replay(turn.id)).snapshot)
    service.parts.blobs.path(snapshot.session_id, hashlib.sha256(SALES).hexdigest()).unlink()
    with pytest.raises(ReplayUnavailable, match=r"input file files/sales\.csv \(sha256 [0-9a-f]{12}"):
        await replay(service, snapshot)


async def test_a_snapshot_naming_a_file_outside_the_workspace_is_refused(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    turn = await captured_turn(service, model_server, "sales")
    data = (await service.parts.store.get_replay(turn.id)).snapshot
    for key, hostile in (("sha256", "../../../../etc/passwd"), ("path", "../outside.csv"), ("path", "/etc/passwd")):
        changed = {**data, "files": [{**data["files"][0], key: hostile}]}
        with pytest.raises(ValueError, match=key):
            ReplaySnapshot.model_validate(changed)
