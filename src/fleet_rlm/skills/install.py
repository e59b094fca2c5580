"""Installing skills into a workspace: a read-only copy under ``skills/<name>/``, made for each turn.

The copy is read-only for the sandbox: files mode 0444 and directories 0755, owned by the host.
As root, where every sandbox runs as a uid of its own, sandbox code cannot change, add or remove a
file there. As any user, the host never reads ``skills/`` back: it is not in the manifest, not an
artifact, not collected by the server and not copied home by ``fleet run``
(:data:`~fleet_rlm.workspace.layout.NOT_LISTED`). Every turn and every child agent gets a fresh copy
from the host's skill folders, never from another workspace, so whatever sandbox code does to its
copy dies with it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Sequence

from fleet_rlm.skills.catalog import Skill, SkillProblem
from fleet_rlm.workspace.layout import SKILLS
from fleet_rlm.workspace.tree import SafeTree

READ_ONLY_FILE_MODE = 0o444
SKILL_DIR_MODE = 0o755


def install_skills(skills: Sequence[Skill], workspace: SafeTree) -> list[SkillProblem]:
    """Make ``workspace``'s ``skills/`` hold exactly ``skills``; returns what could not be copied (a
    file that became a link or grew past its bound since it was found, a full disk)."""
    _remove_old(workspace)
    problems: list[SkillProblem] = []
    for skill in skills:
        for file in skill.files:
            try:
                data = skill.read(file.rel)
                workspace.write(
                    f"{SKILLS}/{skill.name}/{file.rel}", data, mode=READ_ONLY_FILE_MODE, dir_mode=SKILL_DIR_MODE
                )
            except (OSError, ValueError) as exc:
                problems.append(skill.problem(f"not installed: {_reason(exc)}", file.rel))
    return problems


def _reason(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _remove_old(workspace: SafeTree) -> None:
    """Remove whatever ``skills/`` holds (a workspace used for an earlier turn, whose code may have
    replaced it), without following a link: ``rmtree`` walks by descriptors here."""
    with workspace.directory(()) as root:
        try:
            shutil.rmtree(SKILLS, dir_fd=root)
        except FileNotFoundError:
            pass
        except OSError:  # a link or a file in its place (or a tree that cannot be emptied: writes report it)
            with contextlib.suppress(OSError):
                os.unlink(SKILLS, dir_fd=root)
