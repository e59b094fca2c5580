"""Hybrid mode's triage: one short prediction that picks the route for a turn.

It runs on the sub-model (the cheaper model for small judgements; the root's when none is set),
sees the message, the end of the session history and the start of the workspace manifest, and
answers with a route and a one-sentence reason. It never retries through another adapter: a
reply that is not a route is an error the caller turns into the ``rlm`` fallback.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    route: Route = dspy.OutputField()
    reason: str = dspy.OutputField(desc="Why, in one short sentence.")


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
    return TriageVerdict(route=prediction.route, reason=reason)
