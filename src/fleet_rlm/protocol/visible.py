"""Text a person reviews: the characters that would hide or reorder what they see, and their escapes.

A model reads every character of a text; a terminal or a browser shows some of them as nothing
(zero-width and tag characters, invisible letters, runs of variation selectors) or lets them
reorder what follows (bidi overrides and isolates), so a text holding them can say one thing to the
reviewer and another to the model. :func:`hidden_character` finds the first one (memory refuses
texts that hold any); :func:`show_hidden` writes each as a visible escape (``\\u202e``) for
clients that show text stored before that rule. The one exception is what emoji need: a zero-width
joiner between two emoji and a presentation selector after a visible character.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

ZERO_WIDTH_JOINER = "\u200d"
PRESENTATION_SELECTORS = frozenset("\ufe0e\ufe0f")
"""Text and emoji presentation (VS15, VS16): one after a visible character is how emoji are written."""
_DIRECTION_CHANGING = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_INVISIBLE_LETTERS = frozenset("\u034f\u115f\u1160\u3164\uffa0")
"""The combining grapheme joiner and the Hangul fillers: letters or marks that show as nothing."""
_KIND_OF_CATEGORY = {
    "Cc": "a control character",
    "Cf": "an invisible formatting character",
    "Cs": "a lone surrogate",
    "Co": "a private-use character",
    "Cn": "an unassigned character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}


@dataclass(frozen=True)
class HiddenCharacter:
    index: int
    """Where in the text, counting from 0."""
    char: str
    kind: str
    """What it is, as a phrase: "a direction-changing character"."""

    def describe(self) -> str:
        """``U+202E RIGHT-TO-LEFT OVERRIDE (a direction-changing character) at index 4``."""
        name = unicodedata.name(self.char, "")
        return f"{code_point(self.char)}{' ' + name if name else ''} ({self.kind}) at index {self.index}"


def code_point(char: str) -> str:
    return f"U+{ord(char):04X}"


def _is_variation_selector(char: str) -> bool:
    return "\ufe00" <= char <= "\ufe0f" or "\U000e0100" <= char <= "\U000e01ef"


def _kind(text: str, index: int) -> str | None:
    """What hides ``text[index]`` from a reviewer, or None when it shows as itself."""
    char = text[index]
    if char in _DIRECTION_CHANGING:
        return "a direction-changing character"
    previous = text[index - 1] if index else "\x00"
    before = unicodedata.category(previous)
    if char == ZERO_WIDTH_JOINER:
        after = unicodedata.category(text[index + 1]) if index + 1 < len(text) else "Cc"
        joins_emoji = after == "So" and (before in ("So", "Sk") or previous in PRESENTATION_SELECTORS)
        return None if joins_emoji else _KIND_OF_CATEGORY["Cf"]
    if _is_variation_selector(char):
        follows_visible = before[0] in "LNPS" and not _is_variation_selector(previous)
        return None if char in PRESENTATION_SELECTORS and follows_visible else "a variation selector"
    if char in _INVISIBLE_LETTERS:
        return "an invisible character"
    return _KIND_OF_CATEGORY.get(unicodedata.category(char))


def hidden_character(text: str, *, allowed: str = "\n\t") -> HiddenCharacter | None:
    """The first character of ``text`` a reviewer would not see as itself (those in ``allowed``
    aside): a control, format, private-use, unassigned or separator character, a lone surrogate,
    a direction-changing or an invisible character, or a variation selector emoji do not need."""
    for index, char in enumerate(text):
        if char not in allowed and (kind := _kind(text, index)) is not None:
            return HiddenCharacter(index, char, kind)
    return None


def escape(char: str) -> str:
    """``\\u202e``, or ``\\U000e0041`` past the Basic Multilingual Plane."""
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def show_hidden(text: str) -> str:
    """``text`` with each character :func:`hidden_character` finds (but line breaks and tabs) escaped."""
    if hidden_character(text) is None:
        return text
    return "".join(
        escape(char) if char not in "\n\t" and _kind(text, index) is not None else char
        for index, char in enumerate(text)
    )


def excerpt(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters, ``...`` saying where."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def quoted(text: str, limit: int = 60) -> str:
    """Untrusted text in a message: cut to ``limit`` characters, quoted, non-printables escaped."""
    return repr(excerpt(text, limit))
