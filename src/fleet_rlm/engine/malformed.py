"""A reply of the model that does not follow DSPy's field format, turned into an observation.

Small models often drop a field marker, or write the code outside the ``code`` field. DSPy raises
``AdapterParseError`` for such a reply, which would end the turn and throw away the work so far. Fleet
instead records the iteration as one in which nothing ran, with an observation saying what was wrong
and the exact format expected, so the model tries again within the turn's budgets. After
``loop_guard_stop_after`` such replies in a row the loop ends through the extract step (see
:class:`fleet_rlm.engine.program.FleetRLM`).
"""

from __future__ import annotations

import json
from typing import Any

REPLY_EXCERPT_CHARS = 300
NOTHING_RAN = "# nothing ran: the reply did not follow the format"


def expected_format(fields: list[str], *, as_json: bool = False) -> str:
    """The reply layout the adapter reads (DSPy's chat format, or a JSON object), with a placeholder for
    each field."""
    if as_json:
        return json.dumps({name: f"<your {name}>" for name in fields})
    blocks = []
    for name in fields:
        value = "```python\n<your code>\n```" if name == "code" else f"<your {name}>"
        blocks.append(f"[[ ## {name} ## ]]\n{value}")
    return "\n\n".join([*blocks, "[[ ## completed ## ]]"])


def missing_fields(error: Any, fields: list[str]) -> list[str]:
    """The output fields a failed parse did not find (all of them when it parsed none)."""
    parsed = getattr(error, "parsed_result", None)
    found = set(parsed) if isinstance(parsed, dict) else set()
    return [name for name in fields if name not in found]


def malformed_observation(
    error: Any, fields: list[str], in_a_row: int, stop_after: int, *, as_json: bool = False
) -> str:
    """What the model sees in place of an execution's output after a reply that could not be read."""
    reply = " ".join(str(getattr(error, "lm_response", "") or "").split())
    if len(reply) > REPLY_EXCERPT_CHARS:
        reply = reply[:REPLY_EXCERPT_CHARS] + " ..."
    missing = missing_fields(error, fields)
    what = f"the fields {', '.join(missing)} were missing" if missing else "a field's value could not be read"
    layout = (
        "as one JSON object with these fields"
        if as_json
        else "in exactly this format, each field after its marker line"
    )
    return (
        f"[Fleet] Your last reply could not be read, so no code ran: {what}. Your reply began: "
        f"{reply or '(empty)'}\n"
        f"Write your next reply {layout}:\n"
        f"{expected_format(fields, as_json=as_json)}\n"
        f"(reply {in_a_row} in a row that could not be read; after {stop_after} the turn answers from the work "
        "so far)"
    )


def malformed_warning(error: Any, fields: list[str]) -> str:
    """The turn's warning event for a reply that could not be read."""
    missing = missing_fields(error, fields)
    what = f"missing {', '.join(missing)}" if missing else "a field's value could not be read"
    return f"the model's reply did not follow the format ({what}); it was told the expected format and tries again"
