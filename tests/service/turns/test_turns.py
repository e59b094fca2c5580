from __future__ import annotations

import hashlib
import io

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import EventType
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission

pytestmark = pytest.mark.anyio

SALES = b"region,revenue\nnorth,100\nsouth,80\nnorth,70\n"
SUM_AND_SAVE = """import csv
totals = {}
for row in csv.DictReader(open('files/sales.csv')):
    totals[row['region']] = totals.get(row['region'], 0) + int(row['revenue'])
with open('artifacts/totals.csv', 'w') as f:
    f.write(''.join(f'{k},{v}\\n' for k, v in sorted(totals.items())))
print(totals)
SUBMIT(answer=str(sorted(totals.items())))"""


async def test_turn_runs_commits_answer_artifact_and_events(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    session = await service.sessions.create(name="sales")
    await service.files.upload("sales", "sales.csv", io.BytesIO(SALES))
    model_server.script("root", rlm_step("Sum it.", SUM_AND_SAVE))
    turn, created = await service.turns.submit("sales", TurnSubmission(message="Revenue by region"))
    assert created
    stream = await service.turns.events(turn.id)
    events = [e async for e in stream]
    assert events[-1].type is EventType.TURN_COMPLETED
    done = await service.turns.wait(turn.id)
    assert done.status == "completed", done.error
    assert done.answer == "[('north', 170), ('south', 80)]"
    files = {r.path: r for r, _ in await service.files.in_session(session.id)}
    expected = b"north,170\nsouth,80\n"
    assert files["artifacts/totals.csv"].sha256 == hashlib.sha256(expected).hexdigest()
    assert files["artifacts/totals.csv"].turn_id == turn.id
    _, blob = await service.files.download("sales", "artifacts/totals.csv")
    assert blob.read_bytes() == expected
    stored = await service.parts.store.events_after(turn.id)
    assert [e.seq for e in stored] == [e.seq for e in events]


async def test_next_turn_gets_history_and_can_rewrite_earlier_artifacts_but_keeps_no_memory_files(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    await service.sessions.create(name="s")
    write = "open('artifacts/log.txt','w').write('one\\n'); open('memory/notes.md','w').write('n1')\nSUBMIT(answer='first done')"
    model_server.script("root", rlm_step("Write.", write))
    first, _ = await service.turns.submit("s", TurnSubmission(message="start a log"))
    assert (await service.turns.wait(first.id)).status == "completed"

    append = (
        "import os\nopen('artifacts/log.txt','a').write('two\\n')\n"
        "SUBMIT(answer=open('artifacts/log.txt').read() + str(os.listdir('memory')))"
    )
    model_server.script("root", rlm_step("Append.", append))
    second, _ = await service.turns.submit("s", TurnSubmission(message="add to the log"))
    done = await service.turns.wait(second.id)
    assert done.status == "completed", done.error
    assert done.answer == "one\ntwo\n[]"  # memory is reviewed: what a turn writes under memory/ is not kept
    prompt = str(model_server.model.requests_for("root")[-1]["messages"])
    assert "start a log" in prompt and "first done" in prompt
    files = {r.path: r for r, _ in await service.files.in_session("s")}
    assert files["artifacts/log.txt"].sha256 == hashlib.sha256(b"one\ntwo\n").hexdigest()
    assert not [path for path in files if path.startswith("memory/")]


async def test_failed_turn_leaves_the_session_files_as_they_were(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    await service.sessions.create(name="s")
    model_server.script("root", rlm_step("Write then fail.", "open('artifacts/half.csv','w').write('x')\nprint(1)"))
    turn, _ = await service.turns.submit("s", TurnSubmission(message="x", max_iterations=1))
    stream = await service.turns.events(turn.id)
    events = [e async for e in stream]
    done = await service.turns.wait(turn.id)
    assert done.status == "failed" and events[-1].type is EventType.TURN_FAILED
    assert await service.files.in_session("s") == []
