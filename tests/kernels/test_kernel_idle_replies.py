"""A kernel between turns: a thread its code left behind writes reply lines nobody waits for; the
server reads and drops them, and its memory stays where it was."""

from __future__ import annotations

import os
import time

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.settings import SettingsFactory
from tests.api.server import server_in_thread
from tests.security.test_host_bounds import FLOOD_MB, idle_reply_flood, status_field, thread_named

from .conftest import run_turn

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="the host's bounds are about a host running as root")

# The flood waits for the host's report of the kernel's variables after the turn (an execution of its
# own) to be over: a flood during the report would garble the report's own reply and end the kernel.
AFTER_THE_REPORT = idle_reply_flood("session.execution > turn_execution", setup="turn_execution = session.execution\n")


def test_replies_an_idle_kernel_writes_are_not_kept(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    with server_in_thread(make_settings()) as api, api.http() as http:
        http.post("/sessions", json={"name": "s"})
        before_kb = status_field(os.getpid(), "VmRSS")
        model_server.script(
            "root", rlm_step("Leave a thread writing replies.", AFTER_THE_REPORT + "SUBMIT(answer='left')")
        )
        assert run_turn(http, "s", "leave a thread")["answer"] == "left"
        deadline = time.monotonic() + 60
        while not thread_named("flood-done"):  # between turns: nobody waits for the kernel's replies
            assert time.monotonic() < deadline, "the kernel's thread never finished its flood"
        grown_mb = (status_field(os.getpid(), "VmRSS") - before_kb) / 1024
        model_server.script("root", rlm_step("Report.", "release.set()\nflooder.join()\nSUBMIT(answer='carried on')"))
        second = run_turn(http, "s", "carry on")
        assert second["status"] == "completed" and second["answer"] == "carried on", second
        assert grown_mb < FLOOD_MB / 4, f"the server kept {grown_mb:.0f} MB of a {FLOOD_MB} MB flood"
