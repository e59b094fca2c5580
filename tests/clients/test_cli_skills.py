"""``fleet skills ls|show|add`` (in-process, on the real command tree) and ``fleet run``'s skills."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from fleet_rlm.clients.cli.app import app
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.testing.cli import json_events, run_fleet, scripted_env
from fleet_rlm.testing.skills import write_skill

Fleet = Callable[..., Result]


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    """``fleet ARGS`` run in ``tmp_path`` (the project), with the user config directory under it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("COLUMNS", "120")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def user_skills(cwd: Path) -> Path:
    return cwd / "config" / "fleet" / "skills"


def test_ls_lists_every_skill_with_its_source_and_reports_broken_ones(fleet: Fleet, tmp_path: Path) -> None:
    write_skill(tmp_path / ".fleet" / "skills", "tabular", "Our own table conventions.")
    write_skill(user_skills(tmp_path), "notes", "Meeting notes.")
    (user_skills(tmp_path) / "broken").mkdir()

    result = fleet("skills", "ls", "--json")
    assert result.exit_code == 0, result.stderr
    listed = json.loads(result.stdout)
    assert [(s["name"], s["source"]) for s in listed["skills"]] == [
        ("charts", "bundled"),
        ("map-reduce", "bundled"),
        ("notes", "user"),
        ("pdf-text", "bundled"),
        ("tabular", "project"),
    ]
    assert listed["skills"][-1]["description"] == "Our own table conventions."
    assert [(s["name"], s["source"]) for s in listed["overridden"]] == [("tabular", "bundled")]
    assert listed["problems"] == [f"{user_skills(tmp_path)}/broken: has no SKILL.md"]

    table = fleet("skills", "ls")
    assert table.exit_code == 0, table.stderr
    assert "notes" in table.stdout and "Meeting notes." in table.stdout
    assert "bundled skill 'tabular' is overridden by the project skill" in table.stdout
    assert f"{user_skills(tmp_path)}/broken: has no SKILL.md" in table.stderr


def test_show_prints_skill_md_and_lists_the_files(fleet: Fleet, tmp_path: Path) -> None:
    write_skill(
        user_skills(tmp_path), "notes", "Meeting notes.", body="# Notes\nUse [brackets].\n", files={"lib/a.py": "x"}
    )
    result = fleet("skills", "show", "notes")
    assert result.exit_code == 0, result.stderr
    assert "---\nname: notes\ndescription: Meeting notes.\n---\n\n# Notes\nUse [brackets].\n" in result.stdout
    assert "  lib/a.py  (1 bytes)" in result.stdout
    assert "skills/notes/" in result.stdout

    missing = fleet("skills", "show", "nope")
    assert missing.exit_code == 1
    assert "no skill named 'nope'" in missing.stderr


def test_add_checks_then_copies_a_folder_into_the_user_or_project_skills(fleet: Fleet, tmp_path: Path) -> None:
    source = write_skill(
        tmp_path / "downloads", "report-writer-main", "Write reports.", files={"helpers.py": "x = 1\n"}
    )
    (source / "SKILL.md").write_text("---\nname: report\ndescription: Write reports.\n---\nBody\n")

    added = fleet("skills", "add", str(source))
    assert added.exit_code == 0, added.stderr
    installed = user_skills(tmp_path) / "report"
    assert sorted(p.name for p in installed.iterdir()) == ["SKILL.md", "helpers.py"]
    assert f"added user skill 'report': {installed}" in added.stdout

    again = fleet("skills", "add", str(source))
    assert again.exit_code == 1 and "already exists; --force replaces it" in again.stderr
    (source / "helpers.py").write_text("x = 2\n")
    forced = fleet("skills", "add", str(source), "--force")
    assert forced.exit_code == 0, forced.stderr
    assert (installed / "helpers.py").read_text() == "x = 2\n"
    assert not [p for p in user_skills(tmp_path).iterdir() if p.name.startswith(".")]

    project = fleet("skills", "add", str(source), "--project")
    assert project.exit_code == 0, project.stderr
    assert (tmp_path / ".fleet" / "skills" / "report" / "SKILL.md").is_file()
    listed = json.loads(fleet("skills", "ls", "--json").stdout)
    assert ("report", "project") in [(s["name"], s["source"]) for s in listed["skills"]]


def test_add_refuses_a_folder_that_is_not_a_usable_skill(fleet: Fleet, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "SKILL.md").write_text("---\nname: bad\ndescription: [1, 2]\n---\n")
    result = fleet("skills", "add", str(bad))
    assert result.exit_code == 1
    assert f"not a usable skill: {bad}/SKILL.md: front matter: 'description' must be a string" in result.stderr

    linked = write_skill(tmp_path, "linked", "Has a link.")
    (tmp_path / "secret").write_text("host file")
    (linked / "data.txt").symlink_to(tmp_path / "secret")
    result = fleet("skills", "add", str(linked))
    assert result.exit_code == 1
    assert f"{linked}/data.txt: is a symbolic link: a skill is copied without links" in result.stderr
    assert not (user_skills(tmp_path) / "linked").exists()


def test_fleet_run_never_brings_skills_back_into_the_workspace(
    model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    code = (
        "import os\nos.rename('skills', 'gone')\nos.makedirs('skills/x')\nopen('skills/x/SKILL.md', 'w').write('forged')\n"
        "open('artifacts/out.txt', 'w').write(open('gone/tabular/SKILL.md').read().splitlines()[1])\n"
        "SUBMIT(answer='done')"
    )
    model_server.script("root", rlm_step("Tamper.", code))
    workspace = tmp_path / "ws"
    (workspace / "skills").mkdir(parents=True)
    (workspace / "skills" / "mine.txt").write_text("a file of mine, not a skill")
    result = run_fleet(
        ["run", "Anything", "--json", "--workspace", str(workspace)], tmp_path, scripted_env(model_server)
    )
    assert result.returncode == 0, result.stderr
    assert json_events(result.stdout)[-1]["data"]["answer"] == "done"
    assert (workspace / "artifacts" / "out.txt").read_text() == "name: tabular"
    assert sorted(p.name for p in (workspace / "skills").iterdir()) == ["mine.txt"]  # left alone, nothing added
    assert not (workspace / "skills" / "x").exists()
