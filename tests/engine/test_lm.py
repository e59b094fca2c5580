"""The model client as built from settings, checked against what reaches an OpenAI-compatible server."""

from __future__ import annotations

import dspy

from fleet_rlm.config import LMSettings
from fleet_rlm.engine.lm import build_lm
from fleet_rlm.models.scripted import ScriptedModelServer


def test_an_endpoints_reply_is_bounded_by_max_tokens_under_both_names() -> None:
    """llama.cpp's server reads only ``max_tokens``; without it a reply runs until the context is full."""
    with ScriptedModelServer() as server:
        server.script("local", "[[ ## answer ## ]]\n4\n\n[[ ## completed ## ]]")
        lm = build_lm(LMSettings(model="openai/local", base_url=server.base_url, max_tokens=321))
        with dspy.context(lm=lm):
            dspy.Predict("question -> answer")(question="2+2?")
        (request,) = server.model.requests_for("local")
    assert request["max_tokens"] == 321
    assert request.get("max_completion_tokens", 321) == 321


def test_no_limit_is_sent_when_none_is_set() -> None:
    with ScriptedModelServer() as server:
        server.script("local", "[[ ## answer ## ]]\n4\n\n[[ ## completed ## ]]")
        lm = build_lm(LMSettings(model="openai/local", base_url=server.base_url))
        with dspy.context(lm=lm):
            dspy.Predict("question -> answer")(question="2+2?")
        (request,) = server.model.requests_for("local")
    assert "max_tokens" not in request
    assert "max_completion_tokens" not in request
