from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.processes import pid_alive
from fleet_rlm.service.kernels.state import KernelStateFiles, State
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission

pytestmark = pytest.mark.anyio

STALL = 1.0
"""Seconds a stalled disk holds each kernel state write in these tests."""


class LoopGaps:
    """The longest the event loop went without running a 10 ms ticker, while it is watched."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.longest = max(self.longest, now - last)
            last = now

    async def __aenter__(self) -> LoopGaps:
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


@pytest.fixture
def stalled_disk(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every kernel state write waits ``STALL`` seconds first (a disk busy with other writes); returns
    the sessions written, in order, each with the thread that wrote it."""
    written: list[tuple[str, int]] = []
    write = KernelStateFiles.write

    def slow(self: KernelStateFiles, session_id: str, state: State) -> None:
        time.sleep(STALL)
        write(self, session_id, state)
        written.append((session_id, threading.get_ident()))

    monkeypatch.setattr(KernelStateFiles, "write", slow)
    return written


async def test_a_stalled_disk_under_kernel_state_never_stalls_the_event_loop(
    service: FleetService, model_server: ScriptedModelServer, stalled_disk: list[tuple[str, int]]
) -> None:
    loop_thread = threading.get_ident()
    session = await service.sessions.create(name="s")
    model_server.script("root", rlm_step("Keep.", "rows = [1, 2, 3]\nSUBMIT(answer='kept')"))
    async with LoopGaps() as gaps:
        turn, _ = await service.turns.submit("s", TurnSubmission(message="keep"))
        done = await service.turns.wait(turn.id)
        status = await service.kernels.restart("s")
    assert done.status == "completed"
    assert status.live is False and status.ended is not None and status.ended["reason"] == "restart"
    assert [s for s, _ in stalled_disk].count(session.id) >= 3, "opening, snapshot and restart each write the state"
    assert loop_thread not in {thread for _, thread in stalled_disk}, "a state write ran on the event loop's thread"
    assert gaps.longest < STALL, f"the event loop stood still for {gaps.longest:.2f} s"


async def test_changes_of_one_session_apply_in_order_and_others_do_not_wait(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    files = KernelStateFiles(tmp_path)
    release = threading.Event()

    def held(state: State) -> bool:
        release.wait(10)
        state["order"] = [*state.get("order", []), "first"]
        return True

    def second(state: State) -> bool:
        state["order"] = [*state.get("order", []), "second"]
        return True

    first_change = asyncio.create_task(files.change("a", held))
    second_change = asyncio.create_task(files.change("a", second))
    await asyncio.sleep(0.05)
    await asyncio.wait_for(files.save("b", {"other": True}), 5)  # another session is not held up
    assert not second_change.done()
    release.set()
    await asyncio.gather(first_change, second_change)
    assert (await files.load("a"))[0] == {"order": ["first", "second"]}
    assert await files.load("b") == ({"other": True}, False)


async def test_a_change_that_says_nothing_changed_writes_nothing_and_a_deleted_session_is_not_recreated(
    tmp_path: Path,
) -> None:
    files = KernelStateFiles(tmp_path)
    (tmp_path / "kept").mkdir()
    await files.change("kept", lambda state: False)
    assert not files.directory("kept").exists()
    await files.save("gone", {"ended": None})
    assert not (tmp_path / "gone").exists()
    assert await files.load("gone") == ({}, False)


async def test_a_kernel_whose_state_cannot_be_written_still_ends_and_its_sandbox_goes(
    service: FleetService, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = await service.sessions.create(name="s")
    model_server.script("root", rlm_step("Keep.", "rows = [1]\nSUBMIT(answer='kept')"))
    turn, _ = await service.turns.submit("s", TurnSubmission(message="keep"))
    assert (await service.turns.wait(turn.id)).status == "completed"
    await service.kernels.registry.settled(session.id)
    kernel = service.kernels.registry.live[session.id]
    pid = kernel.started.sandbox.worker_pid  # type: ignore[attr-defined]
    assert isinstance(pid, int) and pid_alive(pid)

    def full(self: KernelStateFiles, session_id: str, state: State) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(KernelStateFiles, "write", full)
    await service.kernels.restart("s")
    assert session.id not in service.kernels.registry.live
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not pid_alive(pid), "the kernel's sandbox outlived it"


async def test_a_kernel_that_fails_to_open_is_not_left_holding_the_session(
    service: FleetService, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    await service.sessions.create(name="s")
    load = KernelStateFiles.load
    failures = [OSError(5, "Input/output error")]

    async def flaky(self: KernelStateFiles, session_id: str) -> tuple[State, bool]:
        if failures:
            raise failures.pop()
        return await load(self, session_id)

    monkeypatch.setattr(KernelStateFiles, "load", flaky)
    model_server.script("root", rlm_step("Fine.", "SUBMIT(answer='fine')"))
    failed, _ = await service.turns.submit("s", TurnSubmission(message="first"))
    assert (await service.turns.wait(failed.id)).status == "failed"
    assert service.kernels.registry.live == {}
    model_server.script("root", rlm_step("Fine.", "SUBMIT(answer='fine')"))
    retried, _ = await service.turns.submit("s", TurnSubmission(message="again"))
    done = await asyncio.wait_for(service.turns.wait(retried.id), 60)
    assert done.status == "completed" and done.answer == "fine"
