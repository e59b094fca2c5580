"""What a kernel reports of its variables is hostile: the host keeps it bounded and well-formed, and
the model is shown a bounded listing."""

from __future__ import annotations

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.sandbox.kernel_code import MAX_VARIABLES, KernelVariableInfo, parse_report
from fleet_rlm.service.kernels.text import MAX_KERNEL_TEXT, live_text
from fleet_rlm.testing.settings import SettingsFactory
from tests.api.server import server_in_thread

from .conftest import root_prompt, run_turn

HOSTILE = """class Loud:
    def __repr__(self):
        return '\\x1b[31m' + 'x' * 10_000_000
class Broken:
    def __repr__(self):
        raise RuntimeError('no repr')
loud, broken = Loud(), Broken()
for i in range(300):
    globals()[f'v{i:03}'] = i
SUBMIT(answer='ok')"""


def test_a_hostile_kernel_listing_is_bounded_for_the_api_and_the_model(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    with server_in_thread(make_settings()) as api, api.http() as http:
        http.post("/sessions", json={"name": "s"})
        model_server.script("root", rlm_step("Flood.", HOSTILE))
        assert run_turn(http, "s", "flood")["answer"] == "ok"
        variables = http.get("/sessions/s/kernel").json()["variables"]
        assert len(variables) == MAX_VARIABLES
        by_name = {v["name"]: v for v in variables}
        assert len(by_name["loud"]["preview"]) <= 120 and "\x1b" not in by_name["loud"]["preview"]
        assert by_name["broken"]["preview"] is None and by_name["broken"]["type"] == "Broken"

        model_server.script("root", rlm_step("Done.", "SUBMIT(answer=str(v299))"))
        assert run_turn(http, "s", "again")["answer"] == "299"  # every variable lives on, listed or not
        prompt = root_prompt(model_server)
        listing = prompt[prompt.index("Python variables still defined") :]
        assert "- ... and 160 more" in listing and "x" * 200 not in listing


def test_parse_report_keeps_only_well_formed_bounded_fields() -> None:
    raw = {
        "variables": [
            {"name": "ok", "type": "int", "size": 28, "preview": "1"},
            {"name": "not an identifier", "type": "int", "size": 1},
            {"name": "neg", "type": "T" * 500, "size": -5, "preview": ["not", "text"]},
            {"name": "flag", "type": 3, "size": True, "preview": "\x00\x07bell"},
            "not a dict",
        ],
        "modules": {"pd": "pandas", "bad": "os; rm -rf /", "x y": "json"},
        "saved": ["ok", 3, "../etc"],
        "lost": [{"name": "gen", "reason": "r" * 1000}, {"name": None}],
        "restored": "everything",
    }
    found = parse_report(raw)
    assert [v.name for v in found.variables] == ["ok", "neg", "flag"]
    neg, flag = found.variables[1], found.variables[2]
    assert neg.size == 0 and len(neg.type) == 80 and neg.preview is None
    assert flag.type == "object" and flag.size == 0 and flag.preview == "??bell"
    assert found.modules == {"pd": "pandas"}
    assert found.saved == ["ok"] and found.restored == []
    assert [(item.name, len(item.reason)) for item in found.lost] == [("gen", 200)]
    assert parse_report("junk").variables == [] and parse_report(None).lost == []


def test_the_models_listing_is_bounded() -> None:
    many = [KernelVariableInfo(f"v{i}", "str", 10, "'" + "y" * 110 + "'") for i in range(100)]
    text = live_text(many)
    assert len(text) <= MAX_KERNEL_TEXT + 300
    assert text.endswith("more") and "- v0: str, 10 B = 'yyy" in text
    assert live_text([]) == ""
