"""The modes a turn may ask for, and the routes that answer it (see docs/routes.md)."""

from __future__ import annotations

from typing import Literal

Mode = Literal["hybrid", "rlm", "flex", "direct"]
"""What a turn asks for: a strict route, or ``hybrid`` (triage picks one per turn)."""

Route = Literal["direct", "flex", "rlm"]
"""What answers a turn: one model reply, a dspy.Flex module, or a dspy.RLM loop writing code."""
