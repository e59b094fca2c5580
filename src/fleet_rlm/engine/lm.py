"""Building the root and sub models from settings, each metered by the turn's budget, and the DSPy
context a program runs them in."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import dspy
from dspy.clients import BaseLM
from dspy.utils import BaseCallback

from fleet_rlm.config import LMSettings, require_model
from fleet_rlm.engine.budget import TurnBudget
from fleet_rlm.engine.dspy_compat import UsageTracker, adapter_call_origin, adapter_message_call, process_wide_setting


def build_lm(lm: LMSettings) -> dspy.LM:
    """A ``dspy.LM`` for an OpenAI-compatible endpoint (for the sub-model: ``SubLMSettings.over``)."""
    model = require_model(lm)
    kwargs: dict[str, Any] = {"timeout": lm.timeout}
    if lm.base_url:
        kwargs["api_base"] = lm.base_url
    if lm.api_key is not None:
        kwargs["api_key"] = lm.api_key.get_secret_value()
    elif lm.base_url:
        # OpenAI-compatible servers without auth still expect the header to be present.
        kwargs["api_key"] = "not-needed"
    if lm.base_url and lm.max_tokens:
        # LiteLLM sends the limit as ``max_completion_tokens``, which some OpenAI-compatible servers
        # (llama.cpp's among them) ignore, so a reply would run until the context is full. Such a server
        # reads ``max_tokens``; it is sent as well.
        kwargs["extra_body"] = {"max_tokens": lm.max_tokens}
    return dspy.LM(
        model,
        temperature=lm.temperature,
        max_tokens=lm.max_tokens,
        cache=False,
        num_retries=lm.num_retries,
        **kwargs,
    )


class MeteredLM(BaseLM):  # type: ignore[misc]
    """A model as a turn may call it: every call reserves budget first and records its tokens.

    ``streaming=False`` keeps a call out of the turn's live stream (``llm_query`` runs on tool
    threads that cannot feed DSPy's stream, and its text is not the model's reasoning).
    """

    def __init__(self, lm: dspy.LM, budget: TurnBudget, role: str, *, streaming: bool) -> None:
        super().__init__(model=lm.model, model_type=lm.model_type)
        self.kwargs = dict(lm.kwargs)
        self._lm = lm
        self._budget = budget
        self._role = role
        self._streaming = streaming

    @contextlib.contextmanager
    def _scope(self, kwargs: dict[str, Any]) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            if not self._streaming:
                stack.enter_context(dspy.context(send_stream=None))
            messages = kwargs.get("messages")
            origin = adapter_call_origin()
            if messages is not None and origin is not None and origin[1] is messages:
                # DSPy's adapter vouches for its own message call (to this LM, or to a DSPy wrapper such
                # as the sandbox facade's SandboxLM around it); pass that on to the wrapped LM so it does
                # not mistake the adapter's call for deprecated user code.
                stack.enter_context(adapter_message_call(self._lm, messages))
            yield

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._budget.reserve_call(self._role)
        with self._scope(kwargs):
            return self._lm(*args, **kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        self._budget.reserve_call(self._role)
        with self._scope(kwargs):
            return await self._lm.acall(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self._budget.reserve_call(self._role)
        return self._lm.forward(*args, **kwargs)

    async def aforward(self, *args: Any, **kwargs: Any) -> Any:
        self._budget.reserve_call(self._role)
        return await self._lm.aforward(*args, **kwargs)

    def copy(self, **kwargs: Any) -> MeteredLM:
        return MeteredLM(self._lm.copy(**kwargs), self._budget, self._role, streaming=self._streaming)

    @property
    def supports_function_calling(self) -> bool:
        return bool(getattr(self._lm, "supports_function_calling", False))

    @property
    def supports_reasoning(self) -> bool:
        return bool(getattr(self._lm, "supports_reasoning", False))

    @property
    def supports_response_schema(self) -> bool:
        return bool(getattr(self._lm, "supports_response_schema", False))

    @property
    def supported_params(self) -> set[str]:
        return set(getattr(self._lm, "supported_params", set()))


def program_context(
    lm: BaseLM, usage: UsageTracker, *callbacks: BaseCallback, adapter: dspy.Adapter | None = None
) -> contextlib.AbstractContextManager[None]:
    """The DSPy context a turn's or a child's program runs in: its model, its usage tracker, its adapter
    when it has one of its own, and Fleet's callbacks added after the ones already installed
    (``dspy.configure(callbacks=...)``, e.g. MLflow's DSPy autologging), which ``dspy.context(callbacks=...)``
    alone would replace."""
    installed = list(dspy.settings.callbacks or [])
    extra: dict[str, Any] = {} if adapter is None else {"adapter": adapter}
    return dspy.context(  # type: ignore[no-any-return]
        lm=lm,
        **extra,
        callbacks=[*installed, *callbacks],
        usage_tracker=usage,
        track_usage=True,
        **_nothing_kept_after_the_turn(),
    )


def _nothing_kept_after_the_turn() -> dict[str, Any]:
    """Settings that keep DSPy from holding on to a finished turn's calls in process-wide memory.

    DSPy appends every predictor call (the predictor, its inputs, its prediction) to ``settings.trace``,
    by default one list for the whole process, and every model call (prompt and response) to a global
    history; each keeps up to 10,000 entries. In a server that is the prompts and programs of thousands of
    finished turns. A turn gets a trace list of its own, gone with it, unless its caller traces it (an
    optimizer's ``dspy.context(trace=[])``); and no call history (``dspy.inspect_history`` shows nothing of
    Fleet's turns: their events record them).
    """
    settings: dict[str, Any] = {"disable_history": True}
    if dspy.settings.trace is process_wide_setting("trace"):
        settings["trace"] = []
    return settings
