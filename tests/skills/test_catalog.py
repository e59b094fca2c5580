"""Finding skills: precedence by name, links never followed, bounds, and the bundled skills."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet_rlm.skills import SkillDir, SkillSource, discover, skill_dirs
from fleet_rlm.skills.catalog import BUNDLED_DIR, MAX_FILE_BYTES
from fleet_rlm.testing.skills import write_skill

BUNDLED = ("charts", "map-reduce", "pdf-text", "tabular")


def dirs(tmp_path: Path) -> list[SkillDir]:
    return [
        SkillDir(SkillSource.PROJECT, tmp_path / "project" / ".fleet" / "skills"),
        SkillDir(SkillSource.USER, tmp_path / "config" / "fleet" / "skills"),
        SkillDir(SkillSource.BUNDLED, BUNDLED_DIR),
    ]


def test_bundled_skills_are_all_valid_and_cover_the_basics() -> None:
    catalog = discover([SkillDir(SkillSource.BUNDLED, BUNDLED_DIR)])
    assert catalog.problems == []
    assert [skill.name for skill in catalog.skills] == list(BUNDLED)
    for skill in catalog.skills:
        assert {"SKILL.md", "helpers.py"} <= {file.rel for file in skill.files}
        assert 40 < len(skill.description) <= 1024


def test_default_places_are_the_project_then_the_user_config_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    places = skill_dirs(tmp_path / "project")
    assert [(d.source, d.path) for d in places] == [(d.source, d.path) for d in dirs(tmp_path)]


def test_project_beats_user_beats_bundled_by_name(tmp_path: Path) -> None:
    project, user, _ = dirs(tmp_path)
    write_skill(user.path, "tabular", "The user's own tables.")
    write_skill(user.path, "notes", "User notes.")
    write_skill(project.path, "notes", "Project notes.")
    catalog = discover(dirs(tmp_path))

    by_name = {skill.name: skill for skill in catalog.skills}
    assert sorted(by_name) == sorted({*BUNDLED, "notes"})
    assert (by_name["notes"].source, by_name["notes"].description) == (SkillSource.PROJECT, "Project notes.")
    assert (by_name["tabular"].source, by_name["tabular"].description) == (SkillSource.USER, "The user's own tables.")
    assert by_name["charts"].source is SkillSource.BUNDLED
    assert sorted((s.name, s.source) for s in catalog.shadowed) == [
        ("notes", SkillSource.USER),
        ("tabular", SkillSource.BUNDLED),
    ]
    assert catalog.problems == []


def test_a_broken_skill_is_reported_and_the_next_source_used(tmp_path: Path) -> None:
    project, _, _ = dirs(tmp_path)
    folder = project.path / "tabular"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: tabular\n---\n")
    catalog = discover(dirs(tmp_path))

    used = catalog.get("tabular")
    assert used is not None and used.source is SkillSource.BUNDLED
    assert [str(p) for p in catalog.problems] == [f"{folder}/SKILL.md: front matter: 'description' is missing"]
    assert catalog.problems[0].short() == "project skill tabular/SKILL.md: front matter: 'description' is missing"


def test_name_must_match_the_folder(tmp_path: Path) -> None:
    user = dirs(tmp_path)[1]
    folder = write_skill(user.path, "notes", "Notes.")
    (folder / "SKILL.md").write_text("---\nname: other\ndescription: x\n---\n")
    write_skill(user.path, "Bad Name", "x")
    (user.path / "no-skill-md").mkdir()
    catalog = discover([user])

    assert catalog.skills == []
    assert sorted(str(p) for p in catalog.problems) == [
        f"{user.path}/Bad Name: the folder name is not a valid skill name "
        "(lowercase letters, digits and single '-' or '_' between them, at most 64 characters)",
        f"{user.path}/no-skill-md: has no SKILL.md",
        f"{user.path}/notes/SKILL.md: front matter: 'name' 'other' differs from its folder's name 'notes'",
    ]


def test_links_in_a_user_skill_are_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    outside = tmp_path / "outside"
    write_skill(outside, "linked", "A skill elsewhere.")
    user = dirs(tmp_path)[1]
    folder = write_skill(user.path, "notes", "Notes.", files={"helpers.py": "x = 1\n"})
    (folder / "secret.txt").symlink_to(secret)
    (folder / "etc").symlink_to(tmp_path)
    (user.path / "linked").symlink_to(outside / "linked")
    sneaky = write_skill(user.path, "sneaky", "x")
    (sneaky / "SKILL.md").unlink()
    (sneaky / "SKILL.md").symlink_to(outside / "linked" / "SKILL.md")
    catalog = discover([user])

    assert [skill.name for skill in catalog.skills] == ["notes"]
    assert [file.rel for file in catalog.skills[0].files] == ["SKILL.md", "helpers.py"]
    assert sorted(str(p) for p in catalog.problems) == [
        f"{user.path}/linked: is a symbolic link: not followed (copy the folder instead)",
        f"{user.path}/notes/etc: is a symbolic link: not followed, left out",
        f"{user.path}/notes/secret.txt: is a symbolic link: not followed, left out",
        f"{user.path}/sneaky/SKILL.md: is a symbolic link or not a regular file: not followed",
    ]


def test_a_linked_skills_directory_itself_is_followed(tmp_path: Path) -> None:
    """The directory is the person's own setting (a dotfiles checkout, say): only what is inside is guarded."""
    real = tmp_path / "dotfiles" / "skills"
    write_skill(real, "notes", "Notes.")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "skills").symlink_to(real)
    catalog = discover([SkillDir(SkillSource.USER, tmp_path / "config" / "skills")])
    assert [skill.name for skill in catalog.skills] == ["notes"]


def test_hidden_files_and_byte_code_are_not_part_of_a_skill(tmp_path: Path) -> None:
    user = dirs(tmp_path)[1]
    folder = write_skill(
        user.path,
        "notes",
        "Notes.",
        files={".git/HEAD": "ref", "__pycache__/helpers.cpython-311.pyc": "", "lib/util.py": "", ".env": "KEY=1"},
    )
    (user.path / ".hidden-skill").mkdir()
    catalog = discover([user])
    assert [file.rel for file in catalog.skills[0].files] == ["SKILL.md", "lib/util.py"]
    assert catalog.problems == []
    assert folder.is_dir()


def test_oversized_skills_are_left_out(tmp_path: Path) -> None:
    user = dirs(tmp_path)[1]
    big = write_skill(user.path, "big", "Big.")
    with (big / "data.bin").open("wb") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)
    huge_md = user.path / "verbose"
    huge_md.mkdir()
    (huge_md / "SKILL.md").write_text("---\nname: verbose\ndescription: x\n---\n" + "words " * 60_000)
    catalog = discover([user])
    assert catalog.skills == []
    assert sorted(str(p) for p in catalog.problems) == [
        f"{user.path}/big/data.bin: is larger than 4 MiB",
        f"{user.path}/verbose/SKILL.md: is larger than 256 KiB",
    ]


def test_missing_directories_are_no_problem(tmp_path: Path) -> None:
    catalog = discover([SkillDir(SkillSource.USER, tmp_path / "nothing-here")])
    assert (catalog.skills, catalog.problems) == ([], [])
