"""Fleet's allow-list of what sandbox code may ask of the host, in one place.

Sandbox code reaches the host only through the tools of its sandbox. Each tool a turn's sandbox
can hold is listed here with the arguments Fleet accepts; DSPy's sandbox facade
(``__dspy_construct__`` / ``__dspy_call__``) gets the predictor kinds, constructor options and
field types below. Anything else is refused before DSPy or any host code sees it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from fleet_rlm.engine.dspy_compat import CALL_TOOL, CONSTRUCT_TOOL

REQUIRED: Any = ...
"""Marks an argument without a default."""

PLAIN_TOOLS: dict[str, dict[str, tuple[Any, Any]]] = {
    # DSPy's RLM tools, on the turn's metered sub-model.
    "llm_query": {"prompt": (str, REQUIRED)},
    "llm_query_batched": {"prompts": (list[str], REQUIRED)},
    # Fleet's delegation (engine/delegation.py).
    "spawn_agent": {"task": (str, REQUIRED), "files": (list[str] | None, None), "context": (str | None, None)},
    "spawn_agents": {"tasks": (list[dict[str, Any]], REQUIRED)},
    # Fleet's reviewed memory (engine/memory.py); the service bounds and checks the text.
    "remember": {"text": (str, REQUIRED), "why": (str, REQUIRED)},
}
"""Tools called with JSON arguments: argument name -> (type, default), checked strictly."""

USAGE = {
    "llm_query": "llm_query(prompt) takes one prompt string; for many prompts call llm_query_batched([...])",
    "llm_query_batched": (
        "llm_query_batched(prompts) takes a list of prompt strings and returns their answers as a list in "
        "the same order; for one prompt call llm_query(prompt)"
    ),
    "spawn_agents": "spawn_agents(tasks) takes a list of dicts, each like {'task': '...', 'files': [...]}",
}
"""How a tool is called, told with a refusal of its arguments (small models mix the two query tools up)."""

FACADE_TOOLS = frozenset({CONSTRUCT_TOOL, CALL_TOOL})
"""DSPy's sandbox ``dspy`` facade; every call goes through :mod:`fleet_rlm.engine.bridge.facade`."""

BRIDGED_TOOLS = frozenset(PLAIN_TOOLS) | FACADE_TOOLS


@dataclass(frozen=True)
class NumberOption:
    """A numeric constructor option and its bounds."""

    type: type[int] | type[float]
    low: float
    high: float


GENERATION_OPTIONS = {
    "temperature": NumberOption(float, 0.0, 2.0),
    "max_tokens": NumberOption(int, 1, 32_768),
}

PREDICTOR_KINDS: dict[str, dict[str, NumberOption]] = {
    "Predict": GENERATION_OPTIONS,
    "ChainOfThought": GENERATION_OPTIONS,
}
"""The kinds sandbox code may build, each with the constructor options it may set."""

_CHILD_AGENT = "a sub-agent with its own REPL is a child agent: call spawn_agent, when your tools include it"
_OWN_LOOP = "write the tool loop in your own code and call the tools from there"
REFUSED_KINDS = {
    "RLM": _CHILD_AGENT,
    "CodeAct": _CHILD_AGENT,
    "ProgramOfThought": _CHILD_AGENT,
    "ReAct": _OWN_LOOP,
    "ReActV2": _OWN_LOOP,
}
"""Kinds DSPy's facade offers that Fleet does not build, and what to do instead."""

TYPES: dict[str, Any] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "list": list,
    "dict": dict,
    "tuple": tuple,
    "List": list,
    "Dict": dict,
    "Tuple": tuple,
    "Any": Any,
}
"""Field types by the bare name a signature uses; nothing else is resolved."""

GENERICS: dict[str, tuple[Any, int | None]] = {
    "list": (list, 1),
    "List": (list, 1),
    "dict": (dict, 2),
    "Dict": (dict, 2),
    "tuple": (tuple, None),
    "Tuple": (tuple, None),
    "Optional": (Optional, 1),
    "Union": (Union, None),
    "Literal": (Literal, None),
}
"""Subscriptable names: the typing object and how many arguments it takes (None: one or more)."""

PREDICT_KEYWORDS = frozenset({"signature", "demos", "config", "lm", "prediction", "new_signature"})
"""Call arguments ``dspy.Predict`` takes for itself, so no field may have these names."""

CHAIN_OF_THOUGHT_FIELD = "reasoning"
"""The output ``ChainOfThought`` adds; a signature of that kind may not declare it."""

MAX_SIGNATURE_CHARS = 2_000
MAX_INSTRUCTIONS_CHARS = 20_000
MAX_FIELDS = 32
MAX_FIELD_NAME_CHARS = 64
MAX_TYPE_DEPTH = 4
MAX_TYPE_NODES = 64
MAX_LITERAL_CHARS = 200
MAX_PREDICTORS = 64
"""Predictors one sandbox facade may hold (a new name is a new predictor)."""
MAX_HANDLE_CHARS = 100


def type_vocabulary() -> str:
    """The allowed field types, for messages and the model's instructions."""
    return "str, int, float, bool, list[...], dict[..., ...], tuple[...], Optional[...], Union[...], X | Y, Literal[...], Any"


def sub_agent_guidance(*, delegation: bool) -> str:
    """What ``dspy.RLM`` tells the model about sub-agents, in place of DSPy's text (which offers more kinds)."""
    deeper = "; a sub-agent with its own REPL is a child agent (`spawn_agent`)" if delegation else ""
    return f"""
Sub-agents (dspy):
You may `import dspy` and build single-step sub-agents in the REPL for subtasks that need structured inputs/outputs:
- `dspy.Predict("question -> answer")(question=...)` or `dspy.ChainOfThought("text: str -> labels: list[str]")(text=...)`.
- Field types: {type_vocabulary()}; a field without a type is str. Options: temperature, max_tokens.
- These two are the only kinds{deeper}.
Prefer `llm_query` for simple one-shot prompts.
"""
