"""Reading the numbers written in a text: an answer's figures, to compare with what it was given."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def numbers_in(text: str) -> list[float]:
    """Every number written in ``text``, in order; ``12,345.6`` reads as one number."""
    return [float(match) for match in _NUMBER.findall(_THOUSANDS.sub("", text))]


def written(value: float) -> str:
    """``value`` as a person writes it: ``29342``, ``97.15``."""
    return str(int(value)) if value.is_integer() else repr(value)
