from __future__ import annotations

from fleet_rlm.models.scripted import Reply, ScriptedModelServer, fields_reply, rlm_step
from fleet_rlm.testing.settings import SettingsFactory
from tests.api.server import server_in_thread

from .conftest import events_of, root_prompt, run_turn, run_turn_id

SALES = b"region,revenue\nnorth,100\nsouth,80\nnorth,70\n"
LOAD = """import csv, collections
rows = list(csv.DictReader(open('files/sales.csv')))
totals = collections.Counter()
for row in rows:
    totals[row['region']] += int(row['revenue'])
def top(counter):
    return max(counter, key=counter.get)
SUBMIT(answer=str(len(rows)))"""
REUSE = 'SUBMIT(answer=f"{top(totals)} {totals[top(totals)]} of {len(rows)} rows")'


def test_turn_two_uses_turn_one_variables_without_the_file(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    with server_in_thread(make_settings()) as api, api.http() as http:
        http.post("/sessions", json={"name": "s"})
        http.post("/sessions/s/files", files={"file": ("sales.csv", SALES, "text/csv")})
        model_server.script("root", rlm_step("Load.", LOAD))
        first = run_turn(http, "s", "load the sales")
        assert first["status"] == "completed" and first["answer"] == "3"
        assert [e["sandbox_id"] for e in events_of(first, "kernel.started")]

        # The file is gone: turn 2 can only answer from what turn 1 left in the kernel.
        assert http.delete("/sessions/s/files/files/sales.csv").status_code == 204
        model_server.script("root", rlm_step("Reuse.", REUSE))
        second = run_turn(http, "s", "which region leads?")
        assert second["status"] == "completed", second
        assert second["answer"] == "north 170 of 3 rows"
        assert not events_of(second, "kernel.started") and not events_of(second, "kernel.restored")
        prompt = root_prompt(model_server)
        assert "Python variables still defined from earlier turns" in prompt
        assert "- rows: list" in prompt and "- totals: Counter" in prompt and "- top: function" in prompt

        kernel = http.get("/sessions/s/kernel").json()
        assert kernel["live"] is True and kernel["busy"] is False
        assert {v["name"] for v in kernel["variables"]} >= {"rows", "totals", "top"}
        assert kernel["memory_bytes"] > 0


def test_uploads_between_turns_are_in_files_and_each_turn_binds_its_own_tools_and_limits(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    with server_in_thread(make_settings()) as api, api.http() as http:
        http.post("/sessions", json={"name": "s"})
        model_server.script("root", rlm_step("Keep.", "ask = llm_query\nSUBMIT(answer='ok')"))
        assert run_turn(http, "s", "keep a tool")["answer"] == "ok"

        http.post("/sessions/s/files", files={"file": ("late.csv", b"a\n1\n2\n", "text/csv")})
        http.patch("/sessions/s", json={"settings": {"execution_timeout": 1}})
        model_server.script(
            "root",
            rlm_step("Wait.", "import time\ntime.sleep(5)"),
            rlm_step("Read.", "late = open('files/late.csv').read().split()\nSUBMIT(answer=f'{late} {ask(\"hi\")}')"),
        )
        model_server.script("sub", "sub says hi")
        turn = run_turn(http, "s", "read the late file")
        assert turn["status"] == "completed", turn["error"]
        assert turn["answer"] == "['a', '1', '2'] sub says hi"
        [failed] = events_of(turn, "execution.failed")
        assert failed["error_type"] == "TimeoutError"  # this turn's 1 s limit, on the kept kernel
        assert http.get("/sessions/s/kernel").json()["live"] is True


def test_a_failed_turns_artifacts_do_not_survive_in_the_kept_workspace(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    with server_in_thread(make_settings()) as api, api.http() as http:
        http.post("/sessions", json={"name": "s"})
        model_server.script("root", rlm_step("Write.", "open('artifacts/half.txt', 'w').write('x')\nraise SystemExit"))
        model_server.script("root", Reply(status=500, text="the model broke"))
        assert run_turn(http, "s", "fail")["status"] == "failed"
        model_server.script("root", rlm_step("Look.", "import os\nSUBMIT(answer=str(os.listdir('artifacts')))"))
        turn = run_turn(http, "s", "look")
        assert turn["answer"] == "[]"
        assert [f["path"] for f in http.get("/sessions/s/files").json()["items"]] == []


def test_a_flex_turn_after_an_rlm_turn_gets_the_kernel_as_a_fresh_interpreter(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    with server_in_thread(make_settings()) as api, api.http() as http:
        http.post("/sessions", json={"name": "s"})
        http.post("/sessions/s/files", files={"file": ("notes.txt", b"The code is 7421.\n", "text/plain")})
        model_server.script("root", rlm_step("Define.", "code = 7421\nSUBMIT(answer='ok')"))
        assert run_turn(http, "s", "define")["answer"] == "ok"
        model_server.script("root", fields_reply(reasoning="The notes state it.", answer="The code is 7421."))
        turn = http.post("/sessions/s/turns", json={"message": "What is the code?", "mode": "flex"}).json()
        done = run_turn_id(http, turn["id"])
        assert done["status"] == "completed", done["error"]
        assert done["answer"] == "The code is 7421."
        assert http.get("/sessions/s/kernel").json()["live"] is True
