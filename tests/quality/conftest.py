from __future__ import annotations

import io
from collections.abc import AsyncIterator
from typing import Any

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, fields_reply, rlm_step
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.store import Database, TurnRecord
from fleet_rlm.testing.settings import SettingsFactory
from tests.store.databases import database_url, postgres_databases

__all__ = ["database_url", "postgres_databases"]

JUDGE = "judge"
SALES = b"region,revenue\nnorth,100\nsouth,80\nnorth,70\n"
TOTAL_CODE = """import csv
total = sum(int(r['revenue']) for r in csv.DictReader(open('files/sales.csv')))
open('artifacts/total.txt', 'w').write(f'total={total}\\n')
SUBMIT(answer=f'The total revenue is {total}.')"""


def judge_says(correct: bool, reason: str = "same figures") -> str:
    return fields_reply(correct=str(correct), reason=reason)


@pytest.fixture
def settings_defaults(database_url: str) -> dict[str, Any]:
    """What this directory's ``make_settings`` sets before a test's own overrides."""
    return {
        "database_url": database_url,
        "sandbox_pool_size": 1,
        "judge_lm_model": f"openai/{JUDGE}",
    }


@pytest.fixture
async def service(make_settings: SettingsFactory) -> AsyncIterator[FleetService]:
    settings = make_settings()
    fleet = FleetService(settings, database=Database(str(settings.database_url)))
    await fleet.start()
    yield fleet
    await fleet.stop()


async def captured_turn(
    service: FleetService,
    model_server: ScriptedModelServer,
    session: str,
    *,
    message: str = "What is the total revenue?",
    code: str = TOTAL_CODE,
    capture: bool = True,
) -> TurnRecord:
    """A finished turn of ``session`` (created with sales.csv when new), captured unless told not to."""
    if session not in {s.name for s in await service.sessions.recent(limit=1000)}:
        await service.sessions.create(name=session, settings={"capture_replays": capture})
        await service.files.upload(session, "sales.csv", io.BytesIO(SALES))
    model_server.script("root", rlm_step("Sum it.", code))
    turn, _ = await service.turns.submit(session, TurnSubmission(message=message))
    done = await service.turns.wait(turn.id)
    assert done.status == "completed", done.error
    return done
