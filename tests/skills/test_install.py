"""Installing skills into a workspace: an exact, read-only copy, whatever the workspace held before."""

from __future__ import annotations

import shutil
from pathlib import Path

from fleet_rlm.skills import SkillDir, SkillSource, discover, install_skills
from fleet_rlm.testing.skills import write_skill
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.manifest import build_manifest
from fleet_rlm.workspace.tree import SHARED_DIR_MODE


def test_skills_are_copied_read_only_and_left_out_of_the_manifest(tmp_path: Path) -> None:
    write_skill(tmp_path / "skills", "notes", "Notes.", files={"lib/helpers.py": "x = 1\n"})
    catalog = discover([SkillDir(SkillSource.USER, tmp_path / "skills")])
    workspace = Workspace.create(tmp_path / "ws", mode=SHARED_DIR_MODE)
    workspace.tree.write("files/a.txt", b"input")

    assert install_skills(catalog.skills, workspace.tree) == []
    installed = workspace.root / "skills" / "notes"
    assert (installed / "lib" / "helpers.py").read_text() == "x = 1\n"
    assert {oct(p.stat().st_mode & 0o777) for p in installed.rglob("*") if p.is_file()} == {"0o444"}
    assert {oct(p.stat().st_mode & 0o777) for p in [installed.parent, installed, installed / "lib"]} == {"0o755"}
    assert [entry.path for entry in build_manifest(workspace)] == ["files/a.txt"]


def test_an_earlier_skills_folder_is_replaced_whole_and_a_link_there_not_followed(tmp_path: Path) -> None:
    write_skill(tmp_path / "skills", "notes", "Notes.")
    catalog = discover([SkillDir(SkillSource.USER, tmp_path / "skills")])
    workspace = Workspace.create(tmp_path / "ws", mode=SHARED_DIR_MODE)
    forged = workspace.root / "skills" / "notes"
    forged.mkdir(parents=True)
    (forged / "SKILL.md").write_text("forged")
    (forged / "extra.py").write_text("forged")
    install_skills(catalog.skills, workspace.tree)
    assert sorted(p.name for p in forged.iterdir()) == ["SKILL.md"]
    assert (forged / "SKILL.md").read_text().startswith("---\nname: notes\n")

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("host file")
    shutil.rmtree(workspace.root / "skills")
    (workspace.root / "skills").symlink_to(outside)
    install_skills(catalog.skills, workspace.tree)
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    assert not (workspace.root / "skills").is_symlink()
    assert (workspace.root / "skills" / "notes" / "SKILL.md").is_file()


def test_a_file_replaced_by_a_link_after_it_was_found_is_not_followed(tmp_path: Path) -> None:
    folder = write_skill(tmp_path / "skills", "notes", "Notes.", files={"data.txt": "fine"})
    catalog = discover([SkillDir(SkillSource.USER, tmp_path / "skills")])
    (tmp_path / "secret.txt").write_text("host secret")
    (folder / "data.txt").unlink()
    (folder / "data.txt").symlink_to(tmp_path / "secret.txt")
    workspace = Workspace.create(tmp_path / "ws", mode=SHARED_DIR_MODE)

    problems = install_skills(catalog.skills, workspace.tree)
    assert [problem.short() for problem in problems] == [
        "user skill notes/data.txt: not installed: notes/data.txt is a symbolic link; it was not followed or opened"
    ]
    assert not (workspace.root / "skills" / "notes" / "data.txt").exists()
    assert (workspace.root / "skills" / "notes" / "SKILL.md").is_file()
