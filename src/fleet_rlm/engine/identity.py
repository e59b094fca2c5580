"""What identifies the program a turn runs and the configuration it runs under, for replays and
optimization: two runs with the same identities ran the same instructions, code and models."""

from __future__ import annotations

import hashlib
import json
from importlib.metadata import version
from typing import Any

from fleet_rlm.config import Settings
from fleet_rlm.engine.modes.flex import FLEX_MODULE
from fleet_rlm.engine.program import FleetTask, ProgramSpec


def digest(value: Any) -> str:
    """The sha256 of ``value`` as canonical JSON."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def code_identity() -> str:
    """The sha256 of Fleet's built-in program (the task instructions the RLM's predictors start from and
    the flex module): an optimized program was measured against this code."""
    return digest({"instructions": str(FleetTask.instructions), "flex_module_src": FLEX_MODULE})


def program_identity(program: ProgramSpec | None = None) -> dict[str, str]:
    """The served program's version and the sha256 of its changes, with the built-in code's identity."""
    program = program or ProgramSpec()
    return {"version": program.version, "sha256": program.sha256, "code": code_identity()}


def dependency_identity() -> dict[str, str]:
    """The versions whose change changes what a program does: Fleet's and DSPy's."""
    return {"fleet-rlm": version("fleet-rlm"), "dspy": version("dspy")}


def config_identity(settings: Settings) -> dict[str, Any]:
    """The settings that shape a turn's answers (models, sampling, mode, budgets), never a secret."""
    lm, sub = settings.lm, settings.sub_lm.over(settings.lm)
    shaping = {
        "mode": settings.mode,
        "lm": {"model": lm.model, "base_url": lm.base_url, "temperature": lm.temperature, "max_tokens": lm.max_tokens},
        "sub_lm": {
            "model": sub.model,
            "base_url": sub.base_url,
            "temperature": sub.temperature,
            "max_tokens": sub.max_tokens,
        },
        "budget": settings.budget.model_dump(mode="json", exclude={"model_prices"}),
    }
    return {"sha256": digest(shaping), **shaping}
