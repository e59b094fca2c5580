"""The connection between a Fleet process and a turn process: calls either way, errors that keep
their kind and parts, and no call left waiting when the other end goes."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

import pytest
from dspy.primitives import CodeInterpreterError

from fleet_rlm.engine.memory import MemoryRefused
from fleet_rlm.sandbox.base import CodeFailed, CodeSyntaxError, InvalidInterpreterInput, SandboxCrashed
from fleet_rlm.sandbox.local_sandbox import SandboxStartError
from fleet_rlm.sandbox.tool_calls import ToolError
from fleet_rlm.service.turns.processes.wire import (
    Call,
    CrossedError,
    Notice,
    Peer,
    PeerGone,
    from_failure,
    to_failure,
)


def crash() -> SandboxCrashed:
    error = SandboxCrashed("the worker died", cause="exit status 3")
    error.output = "printed before\n"
    return error


@pytest.mark.parametrize(
    "error",
    [
        CodeFailed("text", error_type="KeyError", message="'a'", line=3, traceback="tb"),
        CodeSyntaxError("bad syntax", 7),
        crash(),
        SandboxStartError("the worker did not come up"),
        InvalidInterpreterInput("bad tool name"),
        MemoryRefused("too long"),
        ToolError("llm_query: refused"),
        CodeInterpreterError("cancelled"),
    ],
)
def test_an_error_crosses_with_its_kind_and_parts(error: Exception) -> None:
    again = from_failure(to_failure(error))
    assert type(again) is type(error)
    assert isinstance(again, CodeInterpreterError) == isinstance(error, CodeInterpreterError)
    assert str(again) == str(error)
    for part in ("error_type", "message", "line", "traceback", "cause", "output"):
        assert getattr(again, part, None) == getattr(error, part, None)


def test_an_unknown_error_crosses_as_its_type_and_message() -> None:
    again = from_failure(to_failure(KeyError("missing")))
    assert isinstance(again, CrossedError) and str(again) == "KeyError: 'missing'"


@pytest.fixture
def pair() -> Iterator[tuple[Peer, Peer, list[Notice]]]:
    left_socket, right_socket = socket.socketpair()
    notices: list[Notice] = []

    def answer_left(call: Call) -> Any:
        if call.kind == "unpicklable":
            return lambda: None
        if call.kind == "fail":
            raise CodeSyntaxError("no", 1)
        if call.kind == "block":
            threading.Event().wait(30)
        return ("left", call.args)

    def answer_right(call: Call) -> Any:
        if call.kind == "ask back":  # a call answered by calling the other end again
            return right.call("echo", call.turn_id, "nested")
        return ("right", call.args)

    left = Peer(Connection(left_socket.detach()), answer_left, notices.append, name="left")
    right = Peer(Connection(right_socket.detach()), answer_right, notices.append, name="right")
    left.start()
    right.start()
    yield left, right, notices
    left.close()
    right.close()


def test_calls_go_either_way_and_may_call_back(pair: tuple[Peer, Peer, list[Notice]]) -> None:
    left, right, _ = pair
    assert right.call("echo", "t", 1, 2) == ("left", (1, 2))
    assert left.call("ask back", "t") == ("left", ("nested",))


def test_a_failed_or_unsendable_answer_raises_for_the_caller(pair: tuple[Peer, Peer, list[Notice]]) -> None:
    _, right, _ = pair
    with pytest.raises(CodeSyntaxError):
        right.call("fail", "t")
    with pytest.raises(RuntimeError, match="pickle"):
        right.call("unpicklable", "t")


def test_a_call_waiting_when_the_other_end_goes_raises_peer_gone(pair: tuple[Peer, Peer, list[Notice]]) -> None:
    left, right, _ = pair
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            right.call("block", "t")
        except BaseException as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=wait, daemon=True)
    waiting.start()
    closed = time.monotonic()
    left.close()
    waiting.join(10)
    assert time.monotonic() - closed < 6
    assert not waiting.is_alive()
    assert [type(e) for e in outcome] == [PeerGone]
    with pytest.raises(PeerGone):
        right.call("echo", "t")
