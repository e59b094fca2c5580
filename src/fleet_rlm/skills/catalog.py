"""Finding skills: the project's, the user's and Fleet's bundled ones, the first by name winning.

A skill is a folder named after the skill holding ``SKILL.md`` (front matter: see
:mod:`fleet_rlm.skills.frontmatter`) and any helper files. Skill folders live in, by precedence:

1. ``.fleet/skills/`` in the project directory (the current directory),
2. ``skills/`` in the user config directory (``~/.config/fleet/skills`` on Linux),
3. the skills bundled with Fleet (``fleet_rlm/skills/bundled/``).

A skill of a higher source replaces a lower one of the same name. Folders are read like a sandbox
workspace, through :class:`~fleet_rlm.workspace.tree.SafeTree`: a link inside a skill folder is never
followed (it is left out and reported), nor is a skill folder that is itself a link. Sizes are
bounded; a skill over a bound, or whose ``SKILL.md`` is missing or malformed, is left out and its
problem reported: the next source's skill of that name, if any, is used instead.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from fleet_rlm.config import user_config_dir
from fleet_rlm.protocol.visible import quoted
from fleet_rlm.skills.frontmatter import NAME_RULE, SkillFormatError, is_valid_name, parse_skill_md
from fleet_rlm.workspace.tree import SafeTree, Skipped

SKILL_FILE = "SKILL.md"
PROJECT_SKILLS = Path(".fleet") / "skills"
BUNDLED_DIR = Path(__file__).with_name("bundled")
MAX_SKILL_MD_BYTES = 256 * 1024
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_SKILL_BYTES = 8 * 1024 * 1024
MAX_SKILL_FILES = 256
MAX_SKILLS = 100
MAX_TOTAL_BYTES = 32 * 1024 * 1024
"""All skills of a catalog together: what every turn copies into its workspace."""
IGNORED_DIRS = frozenset({"__pycache__"})


class SkillSource(StrEnum):
    PROJECT = "project"
    USER = "user"
    BUNDLED = "bundled"


@dataclass(frozen=True)
class SkillDir:
    """A directory of skill folders and where it ranks."""

    source: SkillSource
    path: Path


@dataclass(frozen=True)
class SkillFile:
    rel: str
    """Relative to the skill folder, ``/``-separated: ``"SKILL.md"``, ``"helpers.py"``."""
    size: int


@dataclass(frozen=True)
class SkillProblem:
    """Why a skill, or a file of one, was left out."""

    source: SkillSource
    root: Path
    """The skills directory it was found in."""
    rel: str
    """Relative to ``root``: ``"report/SKILL.md"``, ``"report"``; empty for the directory itself."""
    message: str

    @property
    def where(self) -> str:
        return str(self.root / self.rel) if self.rel else str(self.root)

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"

    def short(self) -> str:
        """The problem without the host's directory names, for events sent to clients."""
        return f"{self.source} skill {self.rel or 'directory'}: {self.message}"


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    source: SkillSource
    folder: Path
    files: tuple[SkillFile, ...]
    tree: SafeTree = field(compare=False, repr=False)
    """The tree of the directory holding the skill folder: every read goes through it."""

    @property
    def size(self) -> int:
        return sum(file.size for file in self.files)

    def problem(self, message: str, rel: str = "") -> SkillProblem:
        """A problem with this skill (or its file ``rel``)."""
        where = f"{self.folder.name}/{rel}" if rel else self.folder.name
        return SkillProblem(self.source, self.folder.parent, where, message)

    def read(self, rel: str, limit: int = MAX_FILE_BYTES) -> bytes:
        """The bytes of the skill's file ``rel``, never through a link; ValueError past ``limit``."""
        return self.tree.read_bytes(f"{self.folder.name}/{rel}", limit)


@dataclass
class Catalog:
    skills: list[Skill] = field(default_factory=list)
    """The skills in force, by name."""
    shadowed: list[Skill] = field(default_factory=list)
    """Valid skills replaced by a higher source's skill of the same name."""
    problems: list[SkillProblem] = field(default_factory=list)

    def get(self, name: str) -> Skill | None:
        return next((skill for skill in self.skills if skill.name == name), None)


def skill_dirs(project_dir: Path | None = None) -> list[SkillDir]:
    """Where skills are looked for, highest precedence first (no project's when the current
    directory is gone)."""
    places = [SkillDir(SkillSource.USER, user_config_dir() / "skills"), SkillDir(SkillSource.BUNDLED, BUNDLED_DIR)]
    try:
        project = project_dir or Path.cwd()
    except FileNotFoundError:
        return places
    return [SkillDir(SkillSource.PROJECT, project / PROJECT_SKILLS), *places]


def discover(dirs: Sequence[SkillDir] | None = None) -> Catalog:
    """Every usable skill of ``dirs`` (default: :func:`skill_dirs`), the first of each name winning."""
    catalog = Catalog()
    chosen: dict[str, Skill] = {}
    total = 0
    for directory in dirs if dirs is not None else skill_dirs():
        for skill in _skills_in(directory, catalog.problems):
            if skill.name in chosen:
                catalog.shadowed.append(skill)
            elif len(chosen) >= MAX_SKILLS:
                catalog.problems.append(skill.problem(f"left out: more than {MAX_SKILLS} skills"))
            elif total + skill.size > MAX_TOTAL_BYTES:
                catalog.problems.append(skill.problem(f"left out: all skills together exceed {_mib(MAX_TOTAL_BYTES)}"))
            else:
                chosen[skill.name] = skill
                total += skill.size
    catalog.skills = sorted(chosen.values(), key=lambda skill: skill.name)
    return catalog


def _skills_in(directory: SkillDir, problems: list[SkillProblem]) -> list[Skill]:
    try:
        root = directory.path.expanduser().resolve()  # the directory itself is the person's to link
        entries = sorted(os.scandir(root), key=lambda entry: entry.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        problems.append(SkillProblem(directory.source, directory.path, "", f"cannot be read: {exc.strerror or exc}"))
        return []
    found: list[Skill] = []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            problems.append(
                SkillProblem(
                    directory.source, root, entry.name, "is a symbolic link: not followed (copy the folder instead)"
                )
            )
        elif stat.S_ISDIR(mode):
            try:
                skill, skipped = load_skill(root, entry.name, directory.source)
            except SkillFormatError as exc:
                rel = os.path.relpath(exc.where, root) if exc.where.startswith(str(root)) else entry.name
                problems.append(SkillProblem(directory.source, root, rel, exc.problem))
                continue
            problems.extend(
                SkillProblem(directory.source, root, item.rel, f"is {item.what}: not followed, left out")
                for item in skipped
            )
            found.append(skill)
    return found


def load_skill(
    parent: Path, folder: str, source: SkillSource, *, name_must_match: bool = True
) -> tuple[Skill, list[Skipped]]:
    """The skill in ``parent/folder`` and the links or special files left out of it. Raises
    :class:`SkillFormatError` naming the file and the problem. With ``name_must_match`` (a skill in
    place), its front matter's ``name`` must be the folder's name."""
    where = parent / folder
    if name_must_match and not is_valid_name(folder):
        raise SkillFormatError(str(where), f"the folder name is not a valid skill name ({NAME_RULE})")
    tree = SafeTree(parent)
    entries = tree.walk(folder)
    skipped = [item for item in tree.take_skipped() if _kept(item.rel.removeprefix(f"{folder}/"))]
    files = tuple(SkillFile(rel, entry.size) for entry in entries if _kept(rel := entry.rel.removeprefix(f"{folder}/")))
    skill_md = where / SKILL_FILE
    if any(item.rel == f"{folder}/{SKILL_FILE}" for item in skipped):
        raise SkillFormatError(str(skill_md), "is a symbolic link or not a regular file: not followed")
    if not any(file.rel == SKILL_FILE for file in files):
        raise SkillFormatError(str(where), f"has no {SKILL_FILE}")
    _check_bounds(where, files)
    try:
        text = tree.read_bytes(f"{folder}/{SKILL_FILE}", MAX_SKILL_MD_BYTES).decode("utf-8")
    except ValueError as exc:  # too large, or not UTF-8
        reason = (
            "is not UTF-8 text"
            if isinstance(exc, UnicodeDecodeError)
            else f"is larger than {MAX_SKILL_MD_BYTES // 1024} KiB"
        )
        raise SkillFormatError(str(skill_md), reason) from None
    except OSError as exc:
        raise SkillFormatError(str(skill_md), f"cannot be read: {exc.strerror or exc}") from None
    header = parse_skill_md(text, str(skill_md))
    if name_must_match and header.name != folder:
        raise SkillFormatError(
            str(skill_md), f"front matter: 'name' {quoted(header.name)} differs from its folder's name {quoted(folder)}"
        )
    skill = Skill(header.name, header.description, source, where, files, tree)
    return skill, skipped


def _kept(rel: str) -> bool:
    """Whether a file of a skill folder belongs to the skill: not hidden, not Python's byte code."""
    parts = rel.split("/")
    return not any(part.startswith(".") or part in IGNORED_DIRS for part in parts) and not rel.endswith(".pyc")


def _check_bounds(where: Path, files: tuple[SkillFile, ...]) -> None:
    if len(files) > MAX_SKILL_FILES:
        raise SkillFormatError(str(where), f"holds more than {MAX_SKILL_FILES} files")
    for file in files:
        if file.size > MAX_FILE_BYTES:
            raise SkillFormatError(str(where / file.rel), f"is larger than {_mib(MAX_FILE_BYTES)}")
    if sum(file.size for file in files) > MAX_SKILL_BYTES:
        raise SkillFormatError(str(where), f"holds more than {_mib(MAX_SKILL_BYTES)}")


def _mib(size: int) -> str:
    return f"{size // (1024 * 1024)} MiB"
