"""Hybrid mode's triage: one short prediction that picks the route for a turn.

It runs on the sub-model (the cheaper model for small judgements; the root's when none is set),
sees the message, the end of the session history and the start of the workspace manifest, and
answers with a route and a one-sentence reason. The route is read leniently (:func:`route_of`: case,
quotes, markdown emphasis, whitespace and a trailing period do not matter). It never retries through
another adapter: a reply that is not a route is an error the caller turns into the ``rlm`` fallback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import cast, get_args

import dspy

from fleet_rlm.engine.modes.context import RouteContext
from fleet_rlm.protocol.routes import Route

HISTORY_CHARS = 2000
MANIFEST_CHARS = 3000


class TriageRoute(dspy.Signature):  # type: ignore[misc]
    """Choose how Fleet, an assistant for data and documents, should answer the person's message.

    - direct: needs no file contents and no code: greetings, thanks, general knowledge, explaining a
      concept, or questions about earlier answers in the conversation.
    - flex: answerable by reading the workspace's text files once: summarise or quote a short
      document, look up a fact in small files. No computation over many rows, nothing to save.
    - rlm: needs code: computing over data (totals, joins, statistics), large or many files, saving
      artifacts (tables, charts, reports), or several steps of exploration.

    When unsure, choose rlm."""

    message: str = dspy.InputField(desc="The person's new message.")
    history: str = dspy.InputField(desc="The end of the conversation so far.")
    workspace: str = dspy.InputField(desc="The start of the workspace file list.")
    route: str = dspy.OutputField(desc="One of: direct, flex, rlm.")
    reason: str = dspy.OutputField(desc="Why, in one short sentence.")


ROUTE_NAMES: tuple[str, ...] = get_args(Route)
_WRAPPING = re.compile(r"""^[\s"'`*_]+|[\s"'`*_.!]+$""")


class NotARoute(ValueError):
    """The triage reply's route is not one of the routes, however leniently read."""


def route_of(text: str) -> Route:
    """The route a label names, on its first line: ``rlm``, ``"RLM".``, ``**Flex**``, `` `direct` `` and
    ``Route: rlm`` are all routes."""
    lines = str(text).strip().splitlines() or [""]
    label = _WRAPPING.sub("", lines[0]).lower()
    if label.startswith("route:"):
        label = _WRAPPING.sub("", label.removeprefix("route:"))
    if label not in ROUTE_NAMES:
        raise NotARoute(f"the triage reply's route {str(text)[:60]!r} is not one of {', '.join(ROUTE_NAMES)}")
    return cast(Route, label)


@dataclass(frozen=True)
class TriageVerdict:
    route: Route
    reason: str


def triage(ctx: RouteContext) -> TriageVerdict:
    """Ask the sub-model for a route; raises on an endpoint error or a reply that is not a route."""
    history = str(ctx.inputs["history"])
    predictor = dspy.Predict(TriageRoute)
    adapter = dspy.ChatAdapter(use_json_adapter_fallback=False)
    with ctx.lm_context(), dspy.context(lm=ctx.sub_lm, adapter=adapter):
        prediction = predictor(
            message=str(ctx.inputs["task"]),
            history=history[-HISTORY_CHARS:],
            workspace=str(ctx.inputs["workspace"])[:MANIFEST_CHARS],
        )
    reason = " ".join(str(prediction.reason or "").split()) or "no reason given"
    return TriageVerdict(route=route_of(prediction.route), reason=reason)
