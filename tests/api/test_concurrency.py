from __future__ import annotations

import asyncio
import time

import httpx

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.sse import aevent_frames

from .server import RunningServer

SESSIONS = 16  # twice DSPy's default async worker limit


async def follow_to_the_end(http: httpx.AsyncClient, session: str) -> str:
    turn_id = (await http.post(f"/sessions/{session}/turns", json={"message": "x"})).json()["id"]
    async with http.stream("GET", f"/turns/{turn_id}/events") as stream:
        frames = [frame async for frame in aevent_frames(stream)]
    return str(frames[-1].json()["type"])


def test_many_sessions_stream_turns_at_once(api: RunningServer, model_server: ScriptedModelServer) -> None:
    def slow_answer(request: object) -> str:
        time.sleep(0.2)  # so that every turn is mid-stream at the same time
        return rlm_step("Answer.", "SUBMIT(answer='ok')")

    model_server.model.default = slow_answer

    async def run_all() -> list[str]:
        limits = httpx.Limits(max_connections=4 * SESSIONS)
        async with httpx.AsyncClient(base_url=api.base_url + "/api/v1", limits=limits, timeout=60) as http:
            for index in range(SESSIONS):
                await http.post("/sessions", json={"name": f"s{index}"})
            return await asyncio.wait_for(
                asyncio.gather(*(follow_to_the_end(http, f"s{i}") for i in range(SESSIONS))), timeout=60
            )

    assert asyncio.run(run_all()) == ["turn.completed"] * SESSIONS
