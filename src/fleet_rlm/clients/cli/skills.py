"""``fleet skills``: list the skills in force, show one, add a folder as a skill (docs/skills.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from fleet_rlm.clients.cli.exit_codes import fail
from fleet_rlm.skills import (
    Catalog,
    Skill,
    SkillExists,
    SkillFormatError,
    SkillSource,
    add_skill,
    discover,
    skill_dirs,
)

app = typer.Typer(
    help="List, show and add skills: guidance and helper code the model reads in its sandbox.", no_args_is_help=True
)
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _warn_problems(catalog: Catalog) -> None:
    for problem in catalog.problems:
        print(f"fleet: warning: skill left out or incomplete: {problem}", file=sys.stderr)


def _skill_json(skill: Skill) -> dict[str, Any]:
    return {
        "name": skill.name,
        "description": skill.description,
        "source": str(skill.source),
        "path": str(skill.folder),
        "files": len(skill.files),
        "size": skill.size,
    }


@app.command("ls")
def list_skills(as_json: JsonOption = False) -> None:
    """The skills every turn gets, with where each comes from (project > user > bundled)."""
    catalog = discover()
    if as_json:
        print(
            json.dumps(
                {
                    "skills": [_skill_json(skill) for skill in catalog.skills],
                    "overridden": [_skill_json(skill) for skill in catalog.shadowed],
                    "problems": [str(problem) for problem in catalog.problems],
                },
                indent=2,
            )
        )
        return
    _warn_problems(catalog)
    console = Console(highlight=False)
    if not catalog.skills:
        console.print("no skills")
        return
    table = Table("name", "source", "description", show_lines=False)
    for skill in catalog.skills:
        table.add_row(skill.name, str(skill.source), skill.description)
    console.print(table)
    for skill in catalog.shadowed:
        winner = catalog.get(skill.name)
        over = f" by the {winner.source} skill" if winner is not None else ""
        console.print(f"[dim]{skill.source} skill {skill.name!r} is overridden{over}[/dim]", markup=True)


@app.command("show")
def show(name: Annotated[str, typer.Argument(help="The skill's name, as `fleet skills ls` lists it.")]) -> None:
    """Print a skill's SKILL.md and list its files."""
    catalog = discover()
    skill = catalog.get(name)
    if skill is None:
        _warn_problems(catalog)
        raise fail(f"no skill named {name!r}; `fleet skills ls` lists them")
    try:
        text = skill.read("SKILL.md").decode("utf-8")
    except (OSError, ValueError) as exc:
        raise fail(f"{skill.folder / 'SKILL.md'}: cannot be read: {exc}") from None
    print(f"# {skill.name} ({skill.source}): {skill.folder}\n")
    print(text.rstrip("\n"))
    print("\nFiles (in the sandbox under skills/" + skill.name + "/):")
    for file in skill.files:
        print(f"  {file.rel}  ({file.size} bytes)")


@app.command("add")
def add(
    path: Annotated[Path, typer.Argument(help="A skill folder: SKILL.md with name and description, plus helpers.")],
    project: Annotated[
        bool, typer.Option("--project", help="Add it to this project's .fleet/skills/ instead of your user skills.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace a skill of the same name there.")] = False,
) -> None:
    """Check a skill folder and copy it into your user skills (or the project's)."""
    source = SkillSource.PROJECT if project else SkillSource.USER
    destination = next((directory.path for directory in skill_dirs() if directory.source is source), None)
    if destination is None:
        raise fail("the current directory no longer exists: there is no project to add the skill to")
    try:
        skill = add_skill(path, destination, source, replace=force)
    except SkillFormatError as exc:
        raise fail(f"not a usable skill: {exc}") from None
    except SkillExists as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"cannot copy {path} to {destination}: {exc}") from None
    print(f"added {source} skill {skill.name!r}: {skill.folder}")
    catalog = discover()
    winner = catalog.get(skill.name)
    if winner is not None and winner.folder != skill.folder:
        print(f"note: the {winner.source} skill {skill.name!r} ({winner.folder}) takes precedence over it")
        return
    for hidden in catalog.shadowed:
        if hidden.name == skill.name and hidden.folder != skill.folder:
            print(f"it overrides the {hidden.source} skill {skill.name!r}")
