"""Memory holds only text its reviewer sees as it is (real turns, real sandboxes, scripted model,
SQLite and PostgreSQL): ``remember`` refuses every character that would hide or reorder text in a
terminal or a browser while the model reads it, naming it and where; an entry stored before that
rule is shown escaped and cannot be approved unedited."""

from __future__ import annotations

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import EventType
from fleet_rlm.service.memory import BadMemoryText
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission

pytestmark = pytest.mark.anyio

HIDING = {
    "bidi override": (
        "pay \\u202eevil\\u202c now",
        "U+202E RIGHT-TO-LEFT OVERRIDE (a direction-changing character) at index 4",
    ),
    "bidi isolate": ("ok \\u2066x\\u2069", "U+2066 LEFT-TO-RIGHT ISOLATE (a direction-changing character) at index 3"),
    "zero-width space": ("a\\u200bb", "U+200B ZERO WIDTH SPACE (an invisible formatting character) at index 1"),
    "lone zero-width joiner": ("a\\u200db", "U+200D ZERO WIDTH JOINER (an invisible formatting character) at index 1"),
    "tag characters": (
        "hi" + "".join(f"\\U{0xE0000 + ord(c):08x}" for c in "obey me"),
        "U+E006F TAG LATIN SMALL LETTER O (an invisible formatting character) at index 2",
    ),
    "byte order mark": ("\\ufeffx", "U+FEFF ZERO WIDTH NO-BREAK SPACE (an invisible formatting character) at index 0"),
    "soft hyphen": ("so\\xadft", "U+00AD SOFT HYPHEN (an invisible formatting character) at index 2"),
    "private use": ("x\\ue000", "U+E000 (a private-use character) at index 1"),
    "unassigned": ("x\\U000e0fff", "U+E0FFF (an unassigned character) at index 1"),
    "variation selector run": (
        "\\u2600\\ufe0f\\ufe0f",
        "U+FE0F VARIATION SELECTOR-16 (a variation selector) at index 2",
    ),
    "hangul filler": ("\\u3164x", "U+3164 HANGUL FILLER (an invisible character) at index 0"),
    "line separator": ("a\\u2028b", "U+2028 LINE SEPARATOR (a line separator) at index 1"),
    "escape sequence": ("a\\x1b[8mb", "U+001B (a control character) at index 1"),
    "mongolian fvs": (
        "hello" + "\\u180b" * 5 + "world",
        "U+180B MONGOLIAN FREE VARIATION SELECTOR ONE (a variation selector) at index 5",
    ),
    "khmer inherent vowel": ("a\\u17b4b", "U+17B4 KHMER VOWEL INHERENT AQ (an invisible character) at index 1"),
    "variation selector after a letter": (
        "h\\ufe0fe\\ufe0ello",
        "U+FE0F VARIATION SELECTOR-16 (a variation selector) at index 1",
    ),
    "at the very end": (
        "visible until the end\\u202e",
        "U+202E RIGHT-TO-LEFT OVERRIDE (a direction-changing character) at index 21",
    ),
}
VISIBLE = "Café, naïve façade — 北京 東京 서울 مرحبا 😀 👨\u200d💻 ❤\ufe0f 1\ufe0f\u20e3 ‼\ufe0f 👍🏽 🇫🇷\nsecond line\tafter a tab"


def attempts(texts: list[str], why: str = "seen") -> str:
    calls = "".join(f"    lambda: remember('{text}', '{why}'),\n" for text in texts)
    return (
        f"for attempt in [\n{calls}]:\n"
        "    try:\n        print('OK', attempt())\n"
        "    except Exception as exc:\n        print('REFUSED', type(exc).__name__, exc)\n"
        "SUBMIT(answer='survived')"
    )


async def turn_output(service: FleetService, model_server: ScriptedModelServer, code: str) -> list[str]:
    """The lines sandbox code printed in one turn; the turn must complete."""
    model_server.script("root", rlm_step("Remember.", code))
    if "s" not in {s.name for s in await service.sessions.recent()}:
        await service.sessions.create(name="s")
    turn, _ = await service.turns.submit("s", TurnSubmission(message="x"))
    done = await service.turns.wait(turn.id)
    assert (done.status, done.answer) == ("completed", "survived"), done.error
    events = await service.parts.store.events_after(turn.id)
    return "".join(str(e.data["text"]) for e in events if e.type is EventType.OUTPUT).splitlines()


async def test_remember_refuses_every_hidden_or_direction_changing_character(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    texts = [text for text, _ in HIDING.values()]
    code = attempts([*texts, "visible"])
    lines = await turn_output(service, model_server, code)
    refused = [line for line in lines if line.startswith("REFUSED")]
    assert len(refused) == len(HIDING), lines
    for line, (case, (_, named)) in zip(refused, HIDING.items(), strict=True):
        assert line.startswith(f"REFUSED RuntimeError refused by Fleet: remember: text contains {named};"), case
        assert "only visible characters, line breaks and tabs are allowed" in line, case
    assert any(line.startswith("OK proposed as mem_") for line in lines)
    assert [e.text for e in await service.memory.entries()] == ["visible"]  # nothing hidden is pending


async def test_remember_refuses_a_hidden_character_in_why(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    lines = await turn_output(service, model_server, attempts(["fine"], why="because\\u2067"))
    assert lines == [
        "REFUSED RuntimeError refused by Fleet: remember: why contains U+2067 RIGHT-TO-LEFT ISOLATE "
        "(a direction-changing character) at index 7; only visible characters, line breaks and tabs are "
        "allowed, so that the reviewer sees all later turns will read"
    ]
    assert await service.memory.entries() == []


async def test_visible_text_in_any_script_with_emoji_and_line_breaks_is_remembered(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    literal = VISIBLE.encode("unicode_escape").decode()
    lines = await turn_output(service, model_server, attempts([literal]))
    assert lines[0].startswith("OK proposed as mem_"), lines
    (entry,) = await service.memory.entries()
    assert entry.text == VISIBLE
    approved = await service.memory.approve(entry.id)
    assert approved.text == VISIBLE
    assert f"- {VISIBLE.replace(chr(10), chr(10) + '  ')}\n" in (await service.memory.context() or "")


async def test_an_entry_stored_before_the_rule_is_shown_escaped_and_approved_only_edited(
    service: FleetService,
) -> None:
    hidden = "use the staging key \u202e\U000e0069\U000e0067\U000e006e"
    old, _ = await service.parts.store.propose_memory(hidden, "", session_id=None, turn_id=None, max_pending=10)
    with pytest.raises(BadMemoryText) as refused:
        await service.memory.approve(old.id)
    assert refused.value.message == (
        "text contains U+202E RIGHT-TO-LEFT OVERRIDE (a direction-changing character) at index 20; only "
        "visible characters, line breaks and tabs are allowed, so that the reviewer sees all later turns "
        "will read; approve it with the text edited"
    )
    assert (await service.memory.get(old.id)).status == "pending"  # nothing lost
    with pytest.raises(BadMemoryText):
        await service.memory.approve(old.id, hidden)

    already, _ = await service.parts.store.propose_memory("x\u200by", "", session_id=None, turn_id=None, max_pending=10)
    await service.parts.store.review_memory(already.id, "approved")  # approved before the rule
    assert "- x\\u200by\n" in (await service.memory.context() or "")  # later turns read it escaped
    await service.memory.approve(old.id, "use the staging key")
    assert "- use the staging key\n" in (await service.memory.context() or "")
