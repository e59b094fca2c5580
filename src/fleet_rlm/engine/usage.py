"""Token accounting for a turn, fed by DSPy's usage tracker from every thread of the turn."""

from __future__ import annotations

import threading
from typing import Any

from fleet_rlm.engine.dspy_compat import UsageTracker


class TurnUsage(UsageTracker):  # type: ignore[misc]
    """DSPy's usage tracker made safe for concurrent ``llm_query_batched`` calls, with totals.

    A child agent's tracker has its turn's tracker as ``parent`` and forwards every entry to it.
    """

    def __init__(self, parent: TurnUsage | None = None) -> None:
        super().__init__()
        self._parent = parent
        self._lock = threading.Lock()
        self._input = 0
        self._output = 0
        self._per_model: dict[str, tuple[int, int]] = {}

    def add_usage(self, lm: str, usage_entry: dict[str, Any]) -> None:
        with self._lock:
            super().add_usage(lm, usage_entry)
            tokens_in = int(usage_entry.get("prompt_tokens") or usage_entry.get("input_tokens") or 0)
            tokens_out = int(usage_entry.get("completion_tokens") or usage_entry.get("output_tokens") or 0)
            self._input += tokens_in
            self._output += tokens_out
            before = self._per_model.get(lm, (0, 0))
            self._per_model[lm] = (before[0] + tokens_in, before[1] + tokens_out)
        if self._parent is not None:  # a child agent's usage also counts for its turn
            self._parent.add_usage(lm, usage_entry)

    @property
    def input_tokens(self) -> int:
        with self._lock:
            return self._input

    @property
    def output_tokens(self) -> int:
        with self._lock:
            return self._output

    def cost(self, prices: dict[str, tuple[float, float]]) -> float:
        """Spend so far, from (input, output) prices per million tokens; unpriced models count 0."""
        with self._lock:
            per_model = dict(self._per_model)
        total = 0.0
        for model, (tokens_in, tokens_out) in per_model.items():
            price_in, price_out = prices.get(model, (0.0, 0.0))
            total += (tokens_in * price_in + tokens_out * price_out) / 1_000_000
        return total
