"""Skills: folders of guidance (``SKILL.md``) and helper code the model reads and runs in its sandbox.

See docs/skills.md. :func:`discover` finds them (project, then user, then bundled),
:func:`install_skills` copies them read-only into a workspace's ``skills/``, and :func:`add_skill`
adds a folder to the user's or the project's skills.
"""

from fleet_rlm.skills.add import SkillExists, add_skill
from fleet_rlm.skills.catalog import (
    Catalog,
    Skill,
    SkillDir,
    SkillFile,
    SkillProblem,
    SkillSource,
    discover,
    load_skill,
    skill_dirs,
)
from fleet_rlm.skills.frontmatter import SkillFormatError, SkillHeader, parse_skill_md
from fleet_rlm.skills.install import install_skills

__all__ = [
    "Catalog",
    "Skill",
    "SkillDir",
    "SkillExists",
    "SkillFile",
    "SkillFormatError",
    "SkillHeader",
    "SkillProblem",
    "SkillSource",
    "add_skill",
    "discover",
    "install_skills",
    "load_skill",
    "parse_skill_md",
    "skill_dirs",
]
