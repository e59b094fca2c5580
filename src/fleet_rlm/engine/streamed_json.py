"""The text of a JSON string value, decoded as its pieces stream in.

With a JSON-style adapter DSPy's stream listener hands on the raw tokens of a field's value: the
opening quote, escapes (``\\n``, ``\\"``, ``\\u00e9``) and the closing ``", "code":`` all reach the
reasoning and code deltas. :class:`StreamedJsonString` turns those pieces into the value's text, even
when an escape is split between two pieces.
"""

from __future__ import annotations

import json

_SIMPLE_ESCAPE_LENGTH = 2
_UNICODE_ESCAPE_LENGTH = 6
_HEX = frozenset("0123456789abcdefABCDEF")


class StreamedJsonString:
    """Decodes one JSON string value fed piece by piece; :meth:`reset` before the next value."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._started = False
        self._ended = False
        self._escape = ""

    def feed(self, piece: str) -> str:
        """The text ``piece`` adds to the value (nothing before its opening quote or after its end)."""
        out: list[str] = []
        for char in piece:
            if self._ended:
                break
            if not self._started:
                self._started = char == '"'
            elif self._escape and not self._unicode_cut_by(char):
                self._escape += char
                if self._escape_complete():
                    out.append(_decoded(self._escape))
                    self._escape = ""
            elif self._escape:  # a \u escape without its four hex digits: shown as written
                out.append(self._escape)
                self._escape = ""
                self._ended = char == '"'
                if char not in '"\\':
                    out.append(char)
                elif char == "\\":
                    self._escape = char
            elif char == "\\":
                self._escape = char
            elif char == '"':
                self._ended = True
            else:
                out.append(char)
        return "".join(out)

    def _unicode_cut_by(self, char: str) -> bool:
        return self._escape[1:2] == "u" and len(self._escape) > 1 and char not in _HEX

    def _escape_complete(self) -> bool:
        if self._escape[1] == "u":
            return len(self._escape) == _UNICODE_ESCAPE_LENGTH
        return len(self._escape) == _SIMPLE_ESCAPE_LENGTH


def _decoded(escape: str) -> str:
    try:
        return str(json.loads(f'"{escape}"'))
    except ValueError:  # not a JSON escape: shown as written
        return escape
