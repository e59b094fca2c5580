"""Adding a skill folder to the user's or the project's skills, once it is known to be usable."""

from __future__ import annotations

import contextlib
import secrets
import shutil
from pathlib import Path

from fleet_rlm.skills.catalog import Skill, SkillSource, load_skill
from fleet_rlm.skills.frontmatter import SkillFormatError
from fleet_rlm.workspace.tree import SafeTree

FILE_MODE = 0o644
DIR_MODE = 0o755


class SkillExists(FileExistsError):
    """A skill of that name is already in the destination."""


def add_skill(source: Path, skills_dir: Path, source_kind: SkillSource, *, replace: bool = False) -> Skill:
    """Copy the skill folder ``source`` to ``skills_dir/<its name>`` and return it as installed there.

    The folder is checked as a skill first (front matter, bounds); one holding a link is refused,
    since the copy would silently lack it. The copy is made beside the destination and renamed into
    place, so a half-copied skill is never seen. Raises :class:`SkillFormatError` or
    :class:`SkillExists` (unless ``replace``).
    """
    folder = source.expanduser().resolve()
    if not folder.is_dir():
        raise SkillFormatError(str(source), "is not a folder")
    skill, skipped = load_skill(folder.parent, folder.name, source_kind, name_must_match=False)
    if skipped:
        first = skipped[0]
        raise SkillFormatError(
            str(folder.parent / first.rel), f"is {first.what}: a skill is copied without links; put the file there"
        )
    skills_dir.mkdir(parents=True, exist_ok=True)
    destination = skills_dir / skill.name
    if (destination.exists() or destination.is_symlink()) and not replace:
        raise SkillExists(f"{destination} already exists; --force replaces it")
    staging = skills_dir / f".incoming-{skill.name}-{secrets.token_hex(4)}"
    try:
        target = SafeTree(skills_dir)
        target.make_dirs(staging.name, DIR_MODE)
        for file in skill.files:
            target.write(f"{staging.name}/{file.rel}", skill.read(file.rel), mode=FILE_MODE, dir_mode=DIR_MODE)
        _swap_in(staging, destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    installed, _ = load_skill(skills_dir, skill.name, source_kind)
    return installed


def _swap_in(staging: Path, destination: Path) -> None:
    """Put ``staging`` at ``destination``, what was there removed (a link itself, never its target)."""
    if not (destination.exists() or destination.is_symlink()):
        staging.rename(destination)
        return
    retired = destination.with_name(f".retired-{destination.name}-{secrets.token_hex(4)}")
    destination.rename(retired)
    try:
        staging.rename(destination)
    except OSError:
        retired.rename(destination)
        raise
    if retired.is_symlink() or not retired.is_dir():
        retired.unlink()
    else:
        with contextlib.suppress(OSError):
            shutil.rmtree(retired)
