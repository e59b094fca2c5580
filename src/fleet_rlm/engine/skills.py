"""A turn's skills: found once per turn on the host, installed read-only into every workspace of it.

The turn's own workspace and each child agent's get a fresh copy from the host's skill folders
(never from another workspace, which sandbox code may have changed). The model is told each
skill's name and description (:func:`fleet_rlm.engine.program.skills_instructions`); what could not
be found or installed becomes a short ``warning`` event without host directory names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet_rlm.engine.observe import TurnTrace
from fleet_rlm.protocol.payloads import TurnWarning
from fleet_rlm.protocol.visible import excerpt
from fleet_rlm.skills import Catalog, SkillProblem, discover, install_skills
from fleet_rlm.workspace.layout import Workspace

MAX_WARNING_CHARS = 500
"""A skill's warning is cut to this: it is stored with every turn, and its text comes from files."""


@dataclass
class TurnSkills:
    catalog: Catalog = field(default_factory=Catalog)

    @classmethod
    def found(cls) -> TurnSkills:
        """The skills in force now (project, user, bundled)."""
        return cls(discover())

    @property
    def listing(self) -> tuple[tuple[str, str], ...]:
        """(name, description) of each skill, for the model's instructions."""
        return tuple((skill.name, skill.description) for skill in self.catalog.skills)

    def install(self, workspace: Workspace, trace: TurnTrace, *, report_catalog: bool = False) -> None:
        """Copy the skills into ``workspace``'s ``skills/``; warn of what is missing (with
        ``report_catalog``, also of the skills that could not be used at all)."""
        problems: list[SkillProblem] = list(self.catalog.problems) if report_catalog else []
        problems += install_skills(self.catalog.skills, workspace.tree)
        for problem in problems:
            trace.emit(TurnWarning(message=excerpt(problem.short(), MAX_WARNING_CHARS)))
