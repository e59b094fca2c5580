"""Text a person reviews: the characters that would hide or reorder what they see, and their escapes.

A model reads every character of a text; a terminal or a browser shows some of them as nothing
(Unicode's default-ignorable characters: zero-width and tag characters, invisible letters and
marks, variation selectors) or lets them
reorder what follows (bidi overrides and isolates), so a text holding them can say one thing to the
reviewer and another to the model. :func:`hidden_character` finds the first one (memory refuses
texts that hold any); :func:`show_hidden` writes each as a visible escape (``\\u202e``) for
clients that show text stored before that rule. The one exception is what emoji need: a zero-width
joiner between two emoji and one presentation selector after a character that can be an emoji.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

ZERO_WIDTH_JOINER = "\u200d"
PRESENTATION_SELECTORS = frozenset("\ufe0e\ufe0f")
"""Text and emoji presentation (VS15, VS16): one after a character that can be an emoji is how
emoji are written."""
DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
"""Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties.txt), first to last code
point: what a renderer shows as nothing when it has no glyph, whatever their category (fillers that
are letters, Khmer inherent vowels and Mongolian free variation selectors that are marks). The web
client holds the same table (static/js/dom.js); tests/protocol/test_visible_js.py checks both."""
EMOJI_BASES_BEYOND_SYMBOLS = frozenset("#*0123456789\u203c\u2049\u2139\u3030\u303d")
"""Characters that can be emoji (a presentation selector may follow) but are not symbols (So, Sm,
Sk): the keycap bases and five punctuation marks or letters."""
_DIRECTION_CHANGING = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_VARIATION_SELECTORS = ((0x180B, 0x180D), (0x180F, 0x180F), (0xFE00, 0xFE0F), (0xE0100, 0xE01EF))
"""Mongolian free variation selectors and the standard and ideographic variation selectors."""
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


def _within(char: str, ranges: tuple[tuple[int, int], ...]) -> bool:
    code = ord(char)
    return any(first <= code <= last for first, last in ranges)


def _can_be_emoji(char: str) -> bool:
    """Whether ``char`` may take a presentation selector: a symbol or one of the few other emoji bases."""
    return unicodedata.category(char) in ("So", "Sm", "Sk") or char in EMOJI_BASES_BEYOND_SYMBOLS


def hidden_kind(text: str, index: int) -> str | None:
    """What hides ``text[index]`` from a reviewer, or None when it shows as itself."""
    char = text[index]
    if char in _DIRECTION_CHANGING:
        return "a direction-changing character"
    previous = text[index - 1] if index else "\x00"
    if char == ZERO_WIDTH_JOINER:
        after = unicodedata.category(text[index + 1]) if index + 1 < len(text) else "Cc"
        before = unicodedata.category(previous)
        joins_emoji = after == "So" and (before in ("So", "Sk") or previous in PRESENTATION_SELECTORS)
        return None if joins_emoji else _KIND_OF_CATEGORY["Cf"]
    if _within(char, _VARIATION_SELECTORS):
        return None if char in PRESENTATION_SELECTORS and _can_be_emoji(previous) else "a variation selector"
    if (kind := _KIND_OF_CATEGORY.get(unicodedata.category(char))) is not None:
        return kind
    return "an invisible character" if _within(char, DEFAULT_IGNORABLE) else None


def hidden_character(text: str, *, allowed: str = "\n\t") -> HiddenCharacter | None:
    """The first character of ``text`` a reviewer would not see as itself (those in ``allowed``
    aside): a control, format, private-use, unassigned or separator character, a lone surrogate,
    a direction-changing or a default-ignorable character, or a variation selector emoji do not need."""
    for index, char in enumerate(text):
        if char not in allowed and (kind := hidden_kind(text, index)) is not None:
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
        escape(char) if char not in "\n\t" and hidden_kind(text, index) is not None else char
        for index, char in enumerate(text)
    )


def excerpt(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters, ``...`` saying where."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def quoted(text: str, limit: int = 60) -> str:
    """Untrusted text in a message: cut to ``limit`` characters, quoted, non-printables escaped."""
    return repr(excerpt(text, limit))
