"""Everything a route needs to run one turn's program, prepared by the turn."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from fleet_rlm.config import Settings
from fleet_rlm.engine.adapters import TurnAdapter
from fleet_rlm.engine.budget import TurnBudget
from fleet_rlm.engine.inputs import Text
from fleet_rlm.engine.lm import MeteredLM, program_context
from fleet_rlm.engine.observe import TurnTrace
from fleet_rlm.engine.program import ProgramSpec


@dataclass
class RouteContext:
    settings: Settings
    budget: TurnBudget
    trace: TurnTrace
    root_lm: MeteredLM
    adapter: TurnAdapter
    """How the root model is asked for its replies and how they are read (``engine.adapters``)."""
    sub_lm: MeteredLM
    max_iterations: int
    inputs: dict[str, Text]
    """``task``, ``workspace`` (manifest) and ``history``, shown to the model whole."""
    interpreter_factory: Callable[[], Any]
    """A zero-argument sandbox factory carrying ``execution_instructions``, as DSPy expects."""
    tools: list[Callable[..., Any]] = field(default_factory=list)
    """Host tools sandbox code may call besides ``llm_query`` (e.g. delegation)."""
    has_files: bool = False
    """True when the turn names context paths or the workspace holds input files."""
    skills: tuple[tuple[str, str], ...] = ()
    """(name, description) of each skill installed under ``skills/``, for the model's instructions."""
    program: ProgramSpec = field(default_factory=ProgramSpec)
    """The program served: Fleet's built-in one unless an optimized one was approved."""

    def lm_context(self, *callbacks: Any) -> AbstractContextManager[None]:
        """The DSPy context every route runs its program in: metered root model, its adapter, usage tracking."""
        return program_context(self.root_lm, self.budget.usage, *callbacks, adapter=self.adapter)
