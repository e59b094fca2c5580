"""Fleet RLM: an open runtime for recursive language models.

``fleet_rlm.FleetInterpreter`` is a DSPy ``CodeInterpreter`` backed by a Fleet sandbox (docs/dspy.md);
it is imported on first use, so importing Fleet stays cheap.
"""

from __future__ import annotations

import os as _os
from typing import TYPE_CHECKING, Any

# DSPy (through LiteLLM) would otherwise try to download a model price list at import time.
_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "true")

if TYPE_CHECKING:
    from fleet_rlm.sandbox.interpreter import FleetInterpreter

__version__ = "0.1.0"
__all__ = ["FleetInterpreter", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "FleetInterpreter":
        from fleet_rlm.sandbox.interpreter import FleetInterpreter

        return FleetInterpreter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
