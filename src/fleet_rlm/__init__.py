"""Fleet RLM: an open runtime for recursive language models."""

import os as _os

# DSPy (through LiteLLM) would otherwise try to download a model price list at import time.
_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "true")

__version__ = "0.1.0"
