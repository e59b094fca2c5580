"""Reading the numbers written in a text: an answer's figures, to compare with what it was given."""

from __future__ import annotations

import re

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
_LIST_MARKER = re.compile(r"^[ \t]*(?:#+[ \t]*)?\d+[.)][ \t]", re.MULTILINE)


def numbers_in(text: str) -> list[float]:
    """Every number written in ``text``, in order; ``12,345.6`` reads as one number."""
    return [float(match) for match in NUMBER.findall(_THOUSANDS.sub("", text))]


def stated_numbers(answer: str) -> list[float]:
    """The distinct numbers an answer states, as magnitudes, in order; numbered-list markers are not figures."""
    return list(dict.fromkeys(abs(value) for value in numbers_in(_LIST_MARKER.sub("", answer))))


def without_thousands(text: str) -> tuple[str, list[int]]:
    """``text`` without thousands separators, and for each of its characters where it was in ``text``."""
    kept = [index for index in range(len(text)) if not (text[index] == "," and _THOUSANDS.match(text, index))]
    return "".join(text[index] for index in kept), kept


def written(value: float) -> str:
    """``value`` as a person writes it: ``29342``, ``97.15``."""
    return str(int(value)) if value.is_integer() else repr(value)
