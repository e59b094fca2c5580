"""Setting a long-running process's start-up objects aside from the cyclic garbage collector."""

from __future__ import annotations

import gc


def freeze_start_up() -> None:
    """Collect once, then freeze what is alive (``gc.freeze``): later collections skip it.

    A started server holds over half a million objects that live as long as the process (the modules,
    classes and functions of DSPy, LiteLLM, FastAPI, SQLAlchemy). Every full collection walked them
    all: under the load benchmark one took ~135 ms, and the server's event loop, with every turn's
    events, stood still for it. Frozen objects are still freed when their last reference goes; only
    cycles among them are never collected, and start-up leaves none worth keeping track of.
    """
    gc.collect()
    gc.freeze()
