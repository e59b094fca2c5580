"""A hostile ``SKILL.md``: a few hundred bytes of YAML aliases nested in each other stand for millions
of values. Fleet refuses anchors and aliases while composing the YAML and never prints a value's
``repr``, so ``fleet skills add`` refuses it at once in a short message, and every turn of a server
with it among the project's skills stores a short warning (real turns, SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleet_rlm.clients.cli.app import app
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import EventType
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.skills.frontmatter import SkillFormatError, parse_skill_md
from fleet_rlm.testing.skills import write_skill

MAX_MESSAGE_CHARS = 300
LEVELS = 6
"""Nine to the sixth values: enough for megabytes of ``repr``, few enough to be quick where it is built."""


def alias_bomb(name: str) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, LEVELS)]
    return f"---\nname: {name}\n" + "\n".join(lines) + f"\ndescription: *l{LEVELS - 1}\n---\n\nGuidance.\n"


def nesting_bomb(name: str) -> str:
    """A few KB of ``[``: one level of Python recursion each while YAML composes them."""
    return f"---\nname: {name}\ndescription: {'[' * 2000}\n---\n\nGuidance.\n"


def write_bomb(parent: Path, name: str = "bomb", text: str | None = None) -> Path:
    folder = parent / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(alias_bomb(name) if text is None else text)
    return folder


def test_fleet_skills_add_refuses_an_alias_bomb_in_a_short_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("COLUMNS", "200")
    bomb = write_bomb(tmp_path / "incoming")
    assert len(alias_bomb("bomb").encode()) < 400

    result = CliRunner().invoke(app, ["skills", "add", str(bomb)])
    assert result.exit_code == 1
    assert f'{bomb}/SKILL.md: the front matter is not valid YAML (line 3: "anchors and aliases are not allowed' in (
        " ".join(result.stderr.split())
    )
    assert len(result.stderr) < MAX_MESSAGE_CHARS + len(str(bomb)), len(result.stderr)
    assert not (tmp_path / "config" / "fleet" / "skills" / "bomb").exists()


def test_fleet_skills_add_refuses_a_nesting_bomb_in_a_short_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("COLUMNS", "200")
    bomb = write_bomb(tmp_path / "incoming", text=nesting_bomb("bomb"))

    result = CliRunner().invoke(app, ["skills", "add", str(bomb)])
    assert result.exit_code == 1, result.output
    assert (
        f"{bomb}/SKILL.md: the front matter is not valid YAML (line 3: 'lists and mappings nest more than 32 deep')"
        in " ".join(result.stderr.split())
    )
    assert len(result.stderr) < MAX_MESSAGE_CHARS + len(str(bomb)), len(result.stderr)
    assert not (tmp_path / "config" / "fleet" / "skills" / "bomb").exists()


@pytest.mark.parametrize(
    ("front_matter", "says"),
    [
        ("name: x\ndescription: *nowhere", "line 3: \"anchors and aliases are not allowed (found an alias: 'nowhere')"),
        ("name: x\ndescription: &d fine", "line 3: \"anchors and aliases are not allowed (found an anchor: 'd')"),
        (
            "name: x\ndescription: " + "{a: " * 40 + "1" + "}" * 40,
            "line 3: 'lists and mappings nest more than 32 deep'",
        ),
        (
            "name: x\ndescription: !" + "t" * 10_000 + " y",
            "line 3: \"could not determine a constructor for the tag '!ttt",
        ),
        ("name: x\ndescription: [" + "'y' , " * 2000 + "]", "'description' must be a string, not a list; quote it"),
        ("name: " + "X" * 10_000 + "\ndescription: d", "'name' 'XXXXXXXXXXXX"),
        ("name: x\ndescription: " + "1" * 5000, "holds a value that cannot be read ('Exceeds the limit"),
    ],
)
def test_a_front_matter_error_quotes_the_file_only_in_short(front_matter: str, says: str) -> None:
    with pytest.raises(SkillFormatError) as refused:
        parse_skill_md(f"---\n{front_matter}\n---\n", "SKILL.md")
    assert says in str(refused.value)
    assert len(str(refused.value)) < MAX_MESSAGE_CHARS


def test_a_usual_front_matter_still_loads() -> None:
    header = parse_skill_md(
        "---\nname: report\ndescription: >\n  Writes the weekly report:\n  tables, charts — and a summary.\n"
        "license: MIT\nmetadata: {owner: finance, tags: [weekly, 'q&a']}\n---\n\nHow to write it.\n",
        "SKILL.md",
    )
    assert (header.name, header.description) == ("report", "Writes the weekly report: tables, charts — and a summary.")
    assert header.body == "\nHow to write it.\n"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("bomb", "warning"),
    [
        (alias_bomb("bomb"), "line 3: \"anchors and aliases are not allowed (found an anchor: 'l0')\""),
        (nesting_bomb("bomb"), "line 3: 'lists and mappings nest more than 32 deep'"),
    ],
    ids=["aliases", "nesting"],
)
async def test_every_turn_with_a_yaml_bomb_among_the_skills_stores_a_short_warning(
    service: FleetService,
    model_server: ScriptedModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bomb: str,
    warning: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    skills = tmp_path / ".fleet" / "skills"
    write_bomb(skills, text=bomb)
    write_skill(skills, "notes", "Meeting notes.")
    await service.sessions.create(name="s")
    for _ in range(2):
        model_server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"))
        turn, _ = await service.turns.submit("s", TurnSubmission(message="x"))
        done = await service.turns.wait(turn.id)
        assert done.status == "completed", done.error
        events = await service.parts.store.events_after(turn.id)
        warnings = [str(e.data["message"]) for e in events if e.type is EventType.WARNING]
        assert [w for w in warnings if w.startswith("project skill bomb/SKILL.md: ")] == [
            f"project skill bomb/SKILL.md: the front matter is not valid YAML ({warning})"
        ]
        assert sum(len(w) for w in warnings) < MAX_MESSAGE_CHARS * len(warnings)
    assert "- notes:" in str(model_server.model.requests_for("root")[-1]["messages"])  # the others still load
