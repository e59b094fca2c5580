"""Deltas of a JSON-style reply carry the field's text: pieces of its raw JSON decoded as they arrive."""

from __future__ import annotations

import pytest

from fleet_rlm.engine.streamed_json import StreamedJsonString

RAW = ' "Sum \\"north\\",\\nthen caf\\u00e9 \\\\ done", "code": "x"}'


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(RAW)])
def test_a_value_split_anywhere_decodes_to_its_text(size: int) -> None:
    decoder = StreamedJsonString()
    pieces = [RAW[i : i + size] for i in range(0, len(RAW), size)]

    assert "".join(decoder.feed(piece) for piece in pieces) == 'Sum "north",\nthen café \\ done'


def test_after_a_reset_the_next_value_decodes_and_a_bad_escape_is_shown_as_written() -> None:
    decoder = StreamedJsonString()
    assert decoder.feed('"one"') == "one"
    assert decoder.feed('"more"') == ""
    decoder.reset()
    assert decoder.feed('"two \\q \\u12" and more') == "two \\q \\u12"
