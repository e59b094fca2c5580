"""Fleet's checks on the host tools of a sandbox: the allow-list, signatures, arguments and error text."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from dspy.primitives.code_interpreter import CodeInterpreterError

from fleet_rlm.config import Settings
from fleet_rlm.engine.bridge import BridgeGuard
from fleet_rlm.engine.bridge.scrub import scrub
from fleet_rlm.engine.bridge.signature import SignatureRefused, build_signature
from fleet_rlm.sandbox.base import NullObserver
from fleet_rlm.sandbox.protocol import decode_message
from fleet_rlm.sandbox.tool_calls import run_tool_call


def types_of(text: str, kind: str = "Predict") -> dict[str, Any]:
    signature = build_signature(text, None, kind=kind)
    return {name: field.annotation for name, field in {**signature.input_fields, **signature.output_fields}.items()}


def test_signatures_are_built_from_the_allowed_types() -> None:
    assert types_of("question -> answer") == {"question": str, "answer": str}
    assert types_of(
        "a: int, b: list[str], c: dict[str, int], d: Optional[float], e: bool | None "
        "-> f: Literal['yes', 'no -> maybe', -1, None], g: tuple[int, ...], h: List[Dict[str, Any]]"
    ) == {
        "a": int,
        "b": list[str],
        "c": dict[str, int],
        "d": float | None,
        "e": bool | None,
        "f": Literal["yes", "no -> maybe", -1, None],
        "g": tuple[int, ...],
        "h": list[dict[str, Any]],
    }


def test_instructions_and_untyped_inputs_keep_dspy_behaviour() -> None:
    signature = build_signature("question -> answer: int", "Count.", kind="ChainOfThought")
    assert signature.instructions == "Count."
    assert signature.input_fields["question"].json_schema_extra["IS_TYPE_UNDEFINED"] is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x: os.environ -> y", "type 'os.environ' is not allowed (dotted names are not resolved)"),
        ("x: list[dspy.Image] -> y", "type 'dspy.Image' is not allowed (dotted names are not resolved)"),
        ("x: __import__('os').system('id') -> y", "is not allowed (it is not one of the allowed types)"),
        ("x: subprocess -> y", "type 'subprocess' is not allowed"),
        ("x: Image -> y", "type 'Image' is not allowed"),
        ("x: type -> y", "type 'type' is not allowed"),
        ("x: list[int, str] -> y", "list[...] takes 1 type argument(s)"),
        ("x: Literal[int] -> y", "Literal[...] takes strings, integers, True, False or None"),
        ("x: list[list[list[list[list[int]]]]] -> y", "nested too deeply"),
        ("x -> y -> z", "exactly one '->' (found 2)"),
        ("x, y", "exactly one '->' (found 0)"),
        ("x): pass\ndef g(y -> z", "not a list like 'a: int, b'"),
        ("x=1 -> y", "without defaults"),
        ("x -> ", "at least one output field"),
        ("x, x -> y", "repeated: x"),
        ("_x -> y", "field name '_x' is not allowed"),
        ("lm -> y", "field name 'lm' is reserved by DSPy"),
        ("x -> json", "field name 'json' is reserved by DSPy"),
        ("x: (" + "(" * 300 + " -> y", "does not parse"),
    ],
)
def test_hostile_or_broken_signatures_are_refused_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(SignatureRefused) as caught:
        build_signature(text, None, kind="Predict")
    assert message in str(caught.value)


def test_chain_of_thought_keeps_its_reasoning_field() -> None:
    with pytest.raises(SignatureRefused, match="ChainOfThought adds the 'reasoning' output itself"):
        build_signature("x -> reasoning", None, kind="ChainOfThought")
    assert "reasoning" in types_of("x -> reasoning")


def test_a_tool_not_on_the_allow_list_stops_the_execution() -> None:
    with pytest.raises(CodeInterpreterError, match="host tool\\(s\\) shell are not on Fleet's allow-list"):
        BridgeGuard().bridge({"llm_query": lambda prompt: prompt, "shell": lambda command: command})


def call(tools: dict[str, Any], name: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """One tool call as the sandbox makes it; the decoded reply."""
    request = {"id": 1, "name": name, "args": list(args), "kwargs": kwargs}
    return decode_message(run_tool_call(tools, request, NullObserver()))


def test_arguments_are_checked_against_the_allow_list_before_the_tool_runs() -> None:
    calls: list[dict[str, Any]] = []

    def spawn_agent(**kwargs: Any) -> str:
        calls.append(kwargs)
        return "ok"

    tools = BridgeGuard().bridge({"spawn_agent": spawn_agent})
    assert call(tools, "spawn_agent", "task", files=["files/a.csv"])["value"] == "ok"
    assert calls == [{"task": "task", "files": ["files/a.csv"]}]
    assert call(tools, "spawn_agent", task=3, shell="rm")["error"] == (
        "refused by Fleet: spawn_agent: task: Input should be a valid string; unexpected argument 'shell'"
    )
    assert call(tools, "spawn_agent", files="a.csv")["error"] == (
        "refused by Fleet: spawn_agent: missing argument 'task'; files: Input should be a valid list"
    )
    assert len(calls) == 1


def test_a_refused_query_call_says_how_the_tool_is_called() -> None:
    """Seen with a real 1.5B model: llm_query_batched called with one string, four times in a row."""
    tools = BridgeGuard().bridge({"llm_query_batched": lambda prompts: prompts, "llm_query": lambda prompt: prompt})
    error = call(tools, "llm_query_batched", "Is this review positive?")["error"]
    assert error.startswith("refused by Fleet: llm_query_batched: prompts: Input should be a valid list. ")
    assert "takes a list of prompt strings" in error and "for one prompt call llm_query(prompt)" in error
    assert call(tools, "llm_query_batched", ["a", "b"])["value"] == ["a", "b"]


def test_host_errors_reach_the_sandbox_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_TEST_BRIDGE_CANARY", "canary-0123456789")
    secret = "sk-settings-secret"

    def llm_query(prompt: str) -> str:
        raise ValueError(
            f"{object()} failed; key {secret}, env canary-0123456789, see /root/.venv/lib/x.py and "
            "http://10.0.0.7:8000/v1 for /workspace/files/a.csv (3/4 done)"
        )

    reply = call(BridgeGuard([secret]).bridge({"llm_query": llm_query}), "llm_query", "hi")
    assert reply["error"] == (
        "ValueError: <host object> failed; key [redacted], env [redacted], see <host path> and "
        "<url> for /workspace/files/a.csv (3/4 done)"
    )


def test_every_secret_setting_is_redacted_from_host_errors() -> None:
    secrets = {"lm_api_key": "sk-root-key", "sub_lm_api_key": "sk-sub-key", "api_token": "api-t0ken"}
    guard = BridgeGuard.for_settings(Settings.model_validate(secrets))

    def llm_query(prompt: str) -> str:
        raise ValueError(" ".join(secrets.values()))

    reply = call(guard.bridge({"llm_query": llm_query}), "llm_query", "hi")
    assert reply["error"] == "ValueError: [redacted] [redacted] [redacted]"


def test_error_text_is_cut_short() -> None:
    assert len(scrub("x" * 5000)) == 1000


class FakeFacade:
    """Stands in for DSPy's construct/call tools, recording what Fleet lets through."""

    def __init__(self) -> None:
        self.built: list[dict[str, Any]] = []
        self.called: list[dict[str, Any]] = []

    def construct(self, kind: str, signature: Any, attr_name: str, kwargs: dict[str, Any] | None = None) -> str:
        self.built.append({"kind": kind, "signature": signature, "kwargs": kwargs})
        return attr_name

    def call(self, handle: str, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
        self.called.append({"handle": handle, "inputs": inputs})
        return {"answer": "42"}


@pytest.fixture
def facade() -> tuple[FakeFacade, dict[str, Any]]:
    fake = FakeFacade()
    return fake, BridgeGuard().bridge({"__dspy_construct__": fake.construct, "__dspy_call__": fake.call})


def test_dspy_gets_a_finished_signature_class_and_bounded_options(facade: tuple[FakeFacade, dict[str, Any]]) -> None:
    fake, tools = facade
    reply = call(
        tools, "__dspy_construct__", "ChainOfThought", "q: str, n: int | None -> answer", "p", {"temperature": 1}
    )
    assert reply["value"] == "p"
    (built,) = fake.built
    assert isinstance(built["signature"], type)
    assert list(built["signature"].input_fields) == ["q", "n"]
    assert built["kwargs"] == {"temperature": 1}
    assert call(tools, "__dspy_call__", "p", {"q": "?"})["value"] == {"answer": "42"}  # n is optional
    assert fake.called == [{"handle": "p", "inputs": {"q": "?"}}]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["Predict", "q -> a", "p", {"temperature": 5}], "option temperature must be a number from 0 to 2"),
        (["Predict", "q -> a", "p", {"max_tokens": 1.5}], "option max_tokens must be an integer from 1 to 32768"),
        (["Predict", "q -> a", "p", {"max_tokens": True}], "option max_tokens must be a"),
        (["Predict", "q -> a", "p", {"callbacks": []}], "does not take option 'callbacks'"),
        (["CodeAct", "q -> a", "p", {}], "dspy.CodeAct is not available in Fleet's sandbox"),
        (["Module", "q -> a", "p", {}], "predictor kind 'Module' is not available"),
        (["Predict", "q -> a", "not a name", {}], "a predictor's name must be an identifier"),
        (["Predict", {"__dspy_sig__": True, "signature": "q -> a", "types": {}}, "p", {}], "a signature is a string"),
        (["Predict", ["q"], "p", {}], "the signature must be a string"),
    ],
)
def test_construct_refusals(facade: tuple[FakeFacade, dict[str, Any]], args: list[Any], message: str) -> None:
    fake, tools = facade
    error = call(tools, "__dspy_construct__", *args)["error"]
    assert error.startswith("refused by Fleet: ")
    assert message in error
    assert fake.built == []


def test_calls_must_match_a_predictor_built_here(facade: tuple[FakeFacade, dict[str, Any]]) -> None:
    fake, tools = facade
    call(tools, "__dspy_construct__", "Predict", "q, context -> a", "p", {})
    assert "needs input(s) context" in call(tools, "__dspy_call__", "p", {"q": "?"})["error"]
    assert "has no input(s) 'lm'" in call(tools, "__dspy_call__", "p", {"q": "?", "context": "", "lm": {}})["error"]
    assert "no predictor named 'other'" in call(tools, "__dspy_call__", "other", {})["error"]
    assert fake.called == []


def test_a_sandbox_builds_a_bounded_number_of_predictors(facade: tuple[FakeFacade, dict[str, Any]]) -> None:
    _, tools = facade
    replies = [call(tools, "__dspy_construct__", "Predict", "q -> a", f"p{i}", {}) for i in range(65)]
    assert all("value" in reply for reply in replies[:64])
    assert replies[64]["error"] == "refused by Fleet: a sandbox may build at most 64 predictors"
    assert "value" in call(tools, "__dspy_construct__", "Predict", "q -> b", "p3", {})  # rebuilding a name is fine
    assert replies[0] == {"type": "tool_result", "id": 1, "value": "p0"}
