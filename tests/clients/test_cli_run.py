"""``fleet run`` and configuration errors, through the real console script in a subprocess."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from fleet_rlm.models.scripted import ScriptedModelServer, fields_reply, rlm_step
from fleet_rlm.testing.cli import run_fleet, scripted_env


def fleet(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_fleet(args, cwd, env)


def model_env(server: ScriptedModelServer) -> dict[str, str]:
    return scripted_env(server)


def test_run_streams_json_events_and_writes_the_artifact(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    (tmp_path / "sales.csv").write_text("region,revenue\nnorth,3\nsouth,4\nnorth,5\n")
    code = (
        "import csv\nt = {}\nfor r in csv.DictReader(open('files/sales.csv')):\n"
        "    t[r['region']] = t.get(r['region'], 0) + int(r['revenue'])\n"
        "open('artifacts/by_region.csv', 'w').write(''.join(f'{k},{v}\\n' for k, v in sorted(t.items())))\n"
        "print(t)\nSUBMIT(answer=str(t))"
    )
    model_server.script("root", rlm_step("Sum it.", code))
    workspace = tmp_path / "ws"
    result = fleet(
        ["run", "Revenue by region", "--file", "sales.csv", "--json", "--workspace", str(workspace)],
        tmp_path,
        model_env(model_server),
    )
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[0]["type"] == "turn.started"
    assert events[-1]["type"] == "turn.completed"
    assert events[-1]["data"]["answer"] == "{'north': 8, 'south': 4}"
    assert events[-1]["data"]["evidence"] == ["{'north': 8, 'south': 4}"]
    assert (workspace / "files" / "sales.csv").is_file()
    assert (workspace / "artifacts" / "by_region.csv").read_text() == "north,8\nsouth,4\n"


def test_run_renders_the_answer_and_artifacts_for_people(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    code = "open('artifacts/note.md', 'w').write('# hi')\nprint('working')\nSUBMIT(answer='**All done**')"
    model_server.script("root", rlm_step("Write a note.", code))
    result = fleet(["run", "Write a note"], tmp_path, model_env(model_server))
    assert result.returncode == 0, result.stderr
    assert "All done" in result.stdout
    assert "working" in result.stdout
    assert "artifacts/note.md" in result.stdout


def test_run_shows_a_sandbox_restart_in_one_line(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    model_server.script(
        "root", rlm_step("Crash.", "import os\nos._exit(3)"), rlm_step("Carry on.", "SUBMIT(answer='carried on')")
    )
    result = fleet(["run", "Crash once"], tmp_path, model_env(model_server))
    assert result.returncode == 0, result.stderr
    restarted = "↻ sandbox restarted (1/3) after exit status 3: variables lost, files kept"
    assert restarted in result.stdout.splitlines()
    assert "carried on" in result.stdout


def test_failed_turn_exits_non_zero_with_one_line_reason(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    model_server.script("root", rlm_step("Ask.", "print(llm_query('a'))"))
    result = fleet(["run", "Anything", "--max-model-calls", "1"], tmp_path, model_env(model_server))
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("fleet: failed: model-call budget exhausted")


def test_missing_model_says_what_to_set(tmp_path: Path) -> None:
    result = fleet(["run", "Anything"], tmp_path, {})
    assert result.returncode == 2
    assert "FLEET_LM_MODEL" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_config_key_fails_fast_and_names_it(tmp_path: Path) -> None:
    (tmp_path / "fleet.toml").write_text('[lm]\nmodel = "openai/x"\nmodle_typo = 1\n')
    result = fleet(["run", "Anything"], tmp_path, {})
    assert result.returncode == 2
    assert f"{tmp_path / 'fleet.toml'}: unknown key 'lm.modle_typo'" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_lines_that_support_an_answer_are_shown_under_it_escaped(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    """An attacker's output states the figure with a terminal escape, a bidi override and HTML around it:
    the evidence shows every one of them as text, never acts on them."""
    code = (
        "print('noise')\nprint('total: 29,342 \\x1b[2J\\x1b]0;pwned\\x07 \\u202eevil <b>bold</b>')\n"
        "SUBMIT(answer='The total is **29342**.')"
    )
    model_server.script("root", rlm_step("Sum it.", code))
    result = fleet(["run", "Total"], tmp_path, model_env(model_server))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    at = lines.index("Evidence:")
    assert "The total is" in "\n".join(lines[:at])
    assert lines[at + 1].rstrip() == "  total: 29,342 \\u001b[2J\\u001b]0;pwned\\u0007 \\u202eevil <b>bold</b>"
    assert "\x1b" not in result.stdout.split("Evidence:")[1] and "\u202e" not in result.stdout.split("Evidence:")[1]


def test_an_unverified_answer_exits_3_and_says_why(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    model_server.script("root", rlm_step("Look.", "print(1 + 1)"), fields_reply(answer="It is 2."))
    result = fleet(["run", "Add", "--max-iterations", "1"], tmp_path, model_env(model_server))
    assert result.returncode == 3, result.stderr
    assert "⚠ unverified answer: the iteration budget ran out" in result.stdout
    assert "It is 2." in result.stdout
    assert "no output of code that ran states its figures" not in result.stdout  # its output states 2
    shown = [line.rstrip() for line in result.stdout.splitlines()]
    assert shown[shown.index("Evidence:") + 1] == "  2"
    assert result.stderr.strip().splitlines()[-1].startswith("fleet: unverified: the iteration budget ran out")


def test_an_incomplete_turn_exits_4_and_failed_code_is_shown_under_it(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    model_server.script("root", *[rlm_step("Divide.", "x = 1\nprint(x / 0)")] * 4)
    result = fleet(["run", "Divide"], tmp_path, model_env(model_server))
    assert result.returncode == 4, result.stderr
    assert result.stdout.count("✗ ZeroDivisionError: division by zero (line 2)") == 4
    assert "◐ turn incomplete: the same code failed the same way 4 times in a row" in result.stdout
    assert result.stderr.strip().splitlines()[-1].startswith("fleet: incomplete: the same code failed")


def test_library_log_lines_reach_the_screen_only_with_verbose(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    env = model_env(model_server)
    step = rlm_step("Look.", "print('looked')")
    extract = fields_reply(answer="looked at it")
    model_server.script("root", step, extract)
    quiet = fleet(["run", "Look", "--max-iterations", "1"], tmp_path, env)
    assert quiet.returncode == 3, quiet.stderr  # extracted, so unverified
    assert "RLM reached max iterations" not in quiet.stdout + quiet.stderr

    model_server.script("root", step, extract)
    loud = fleet(["run", "Look", "--max-iterations", "1", "--verbose"], tmp_path, env)
    assert loud.returncode == 3, loud.stderr
    assert "RLM reached max iterations" in loud.stderr and "RLM reached" not in loud.stdout
