from __future__ import annotations

import asyncio

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission

pytestmark = pytest.mark.anyio


async def pool_filled(service: FleetService, count: int) -> None:
    for _ in range(300):
        if service.kernels.pool.idle_count >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the pool never held {count} started sandboxes: {service.kernels.pool.last_error}")


async def test_turns_take_a_started_sandbox_and_the_pool_refills(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    await pool_filled(service, 1)
    await service.sessions.create(name="s")
    model_server.script("root", rlm_step("Where am I?", "import os\nSUBMIT(answer=str(sorted(os.listdir('.'))))"))
    turn, _ = await service.turns.submit("s", TurnSubmission(message="x"))
    done = await service.turns.wait(turn.id)
    assert done.status == "completed" and done.answer == "['artifacts', 'files', 'memory', 'skills', 'tmp']"
    assert (service.kernels.pool.warm_leases, service.kernels.pool.cold_leases) == (1, 0)
    await pool_filled(service, 1)


async def test_a_session_with_other_sandbox_limits_gets_a_cold_sandbox_that_honours_them(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    await pool_filled(service, 1)
    await service.sessions.create(name="strict", settings={"execution_timeout": 1.0})
    model_server.script(
        "root",
        rlm_step("Spin.", "import time\ntime.sleep(5)"),
        rlm_step("Give up.", "SUBMIT(answer='stopped')"),
    )
    turn, _ = await service.turns.submit("strict", TurnSubmission(message="x"))
    done = await service.turns.wait(turn.id)
    assert done.status == "completed" and done.usage["sandbox_errors"] == 1
