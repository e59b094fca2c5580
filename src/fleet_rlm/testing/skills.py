"""Writing skill folders for tests, and loading a bundled skill's helper module in the test process."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from fleet_rlm.skills.catalog import BUNDLED_DIR


def write_skill(
    parent: Path, name: str, description: str, *, body: str = "Guidance.\n", files: dict[str, str] | None = None
) -> Path:
    """A skill folder ``parent/name`` with a valid SKILL.md and ``files`` (relative path -> text)."""
    folder = parent / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n\n{body}")
    for rel, text in (files or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


def bundled_helpers(skill: str) -> ModuleType:
    """The ``helpers.py`` of a bundled skill, loaded as the skill's guidance tells the model to."""
    spec = importlib.util.spec_from_file_location(
        f"{skill.replace('-', '_')}_helpers", BUNDLED_DIR / skill / "helpers.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
