from __future__ import annotations

import pytest

from fleet_rlm.clients.terminal.commands import (
    COMMANDS,
    ArgKind,
    Command,
    CommandError,
    Message,
    help_lines,
    parse_budget,
    parse_line,
)


def test_plain_text_is_a_message_and_blank_is_nothing() -> None:
    assert parse_line("  sum revenue by region  ") == Message("  sum revenue by region  ".strip("\n"))
    assert parse_line("   ") is None
    assert parse_line("line one\nline two") == Message("line one\nline two")


def test_double_slash_sends_a_message_starting_with_a_slash() -> None:
    assert parse_line("//etc/hosts is what?") == Message("/etc/hosts is what?")


def test_commands_split_arguments_like_a_shell() -> None:
    assert parse_line('/attach "my sales.csv" notes.txt') == Command("attach", ("my sales.csv", "notes.txt"))
    assert parse_line("/GET artifacts/x.csv out/") == Command("get", ("artifacts/x.csv", "out/"))
    assert parse_line("/artifacts") == Command("artifacts")


@pytest.mark.parametrize(
    ("line", "hint"),
    [
        ("/atach x", "unknown command /atach (did you mean /attach?); /help lists the commands"),
        ("/frobnicate", "unknown command /frobnicate; /help lists the commands"),
        ("/attach", "/attach needs 1 argument: usage /attach PATH..."),
        ("/get", "/get needs 1 argument: usage /get REMOTE [LOCAL]"),
        ("/get a b c", "/get takes at most 2 arguments: usage /get REMOTE [LOCAL]"),
        ("/artifacts now", "/artifacts takes at most 0 arguments: usage /artifacts"),
        ("/mode fast", "/mode fast: not a mode; choose one of hybrid, rlm, flex, direct"),
        ("/attach 'unclosed", "/attach: No closing quotation (usage: /attach PATH...)"),
        ("/help nope", "/help nope: no such command; /help lists the commands"),
        ("/budget iterations=ten", "/budget iterations=ten: iterations must be a whole number"),
        ("/budget timeout=0", "/budget timeout=0: timeout must be greater than 0"),
        (
            "/budget speed=3",
            "/budget speed=3: expected KEY=VALUE with KEY one of iterations, model_calls, timeout, tokens",
        ),
    ],
)
def test_bad_input_gives_a_one_line_hint(line: str, hint: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse_line(line)
    assert str(caught.value) == hint
    assert "\n" not in str(caught.value)


def test_budget_maps_short_keys_to_settings() -> None:
    assert parse_budget(("iterations=5", "model_calls=9", "timeout=30.5", "tokens=off")) == {
        "max_iterations": 5,
        "max_model_calls": 9,
        "turn_timeout": 30.5,
        "max_tokens_per_turn": None,
    }


def test_every_command_has_help_and_argument_kinds_repeat_for_lists() -> None:
    assert help_lines()[0][0] == "/help [COMMAND]"
    assert len(help_lines()) == len(COMMANDS)
    assert help_lines("/get") == [("/get REMOTE [LOCAL]", "download a file (sha256 verified)")]
    assert COMMANDS["attach"].kind_of(3) is ArgKind.LOCAL_PATH
    assert COMMANDS["get"].kind_of(0) is ArgKind.REMOTE_PATH
    assert COMMANDS["get"].kind_of(1) is ArgKind.LOCAL_PATH
    assert COMMANDS["get"].kind_of(2) is None
    assert COMMANDS["quit"].kind_of(0) is None
