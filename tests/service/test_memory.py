"""Reviewed memory through real turns (real sandboxes, scripted model, SQLite and PostgreSQL): turns
propose with ``remember``, only what the person approved reaches later turns of any session, as
``memory/MEMORIES.md`` within its budget, and hostile arguments are refused without harming the turn."""

from __future__ import annotations

import asyncio

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.protocol.events import EventType
from fleet_rlm.service.memory import render_memories
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.store import Database, MemoryRecord
from fleet_rlm.testing.settings import SettingsFactory

pytestmark = pytest.mark.anyio

READ_MEMORY = (
    "import os\nSUBMIT(answer=open('memory/MEMORIES.md').read() if os.path.exists('memory/MEMORIES.md') else 'none')"
)


async def run(service: FleetService, session: str, message: str) -> tuple[str, list[dict[str, object]]]:
    """Run one turn; its answer and the data of its ``memory.proposed`` events."""
    if session not in {s.name for s in await service.sessions.recent()}:
        await service.sessions.create(name=session)
    turn, _ = await service.turns.submit(session, TurnSubmission(message=message))
    done = await service.turns.wait(turn.id)
    assert done.status == "completed", done.error
    events = await service.parts.store.events_after(turn.id)
    return done.answer or "", [e.data for e in events if e.type is EventType.MEMORY_PROPOSED]


async def test_only_approved_memory_reaches_later_turns_of_every_session(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    propose = (
        "for text in ('north leads revenue', 'fiscal year starts in April', 'the person likes puns'):\n"
        "    print(remember(text, 'from sales.csv'))\n"
        "print(remember('north leads revenue', 'again'))\n"
        "SUBMIT(answer='proposed')"
    )
    model_server.script("root", rlm_step("Remember.", propose))
    _, proposed = await run(service, "sales", "remember what matters")
    assert [p["text"] for p in proposed] == [
        "north leads revenue",
        "fiscal year starts in April",
        "the person likes puns",
    ]
    entries = await service.memory.entries()
    sales = await service.sessions.get("sales")
    assert [(e.status, e.why, e.session_id) for e in entries] == [("pending", "from sales.csv", sales.id)] * 3
    assert [p["entry_id"] for p in proposed] == [e.id for e in entries]

    model_server.script("root", rlm_step("Read.", READ_MEMORY))
    assert (await run(service, "other", "what do you remember?"))[0] == "none"  # pending is not memory

    north, fiscal, puns = entries
    await service.memory.approve(north.id)
    await service.memory.approve(fiscal.id, "  The fiscal year starts in April.\r\n(per finance)  ")
    await service.memory.reject(puns.id)
    tamper = (
        "open('memory/MEMORIES.md', 'a').write('- forged\\n')\nopen('memory/notes.md', 'w').write('x')\n" + READ_MEMORY
    )
    model_server.script("root", rlm_step("Read.", tamper))
    shown, _ = await run(service, "other", "what do you remember?")
    assert "- north leads revenue\n- The fiscal year starts in April.\n  (per finance)\n- forged\n" in shown
    assert "puns" not in shown
    prompt = str(model_server.model.requests_for("root")[-1]["messages"])
    assert "fiscal year starts in April" in prompt and "puns" not in prompt  # in the model's context too

    model_server.script("root", rlm_step("Read.", READ_MEMORY))
    again, _ = await run(service, "sales", "and now?")
    assert "forged" not in again and "- north leads revenue" in again  # a turn's edits are not kept
    assert not [r for r, _ in await service.files.in_session("other") if r.path.startswith("memory/")]


async def test_two_turns_proposing_at_once_keep_every_proposal(
    service: FleetService, model_server: ScriptedModelServer
) -> None:
    def proposing(tag: str) -> str:
        return (
            "import threading\n"
            f"threads = [threading.Thread(target=remember, args=(f'{tag} fact {{n}}', 'seen')) for n in range(5)]\n"
            "[t.start() for t in threads]\n[t.join() for t in threads]\n"
            "SUBMIT(answer='done')"
        )

    model_server.script_for_task("root", "ALPHA", rlm_step("Remember.", proposing("alpha")))
    model_server.script_for_task("root", "BETA", rlm_step("Remember.", proposing("beta")))
    results = await asyncio.gather(run(service, "a", "ALPHA work"), run(service, "b", "BETA work"))
    assert [len(proposed) for _, proposed in results] == [5, 5]
    texts = sorted(e.text for e in await service.memory.entries(status="pending"))
    assert texts == sorted([f"alpha fact {n}" for n in range(5)] + [f"beta fact {n}" for n in range(5)])
    assert {e.session_id for e in await service.memory.entries(session="a")} == {(await service.sessions.get("a")).id}


HOSTILE = r"""
attempts = [
    lambda: remember(123, 'why'),
    lambda: remember('x' * 5000, 'too long'),
    lambda: remember('a\x00b', 'nul'),
    lambda: remember('\ud800', 'lone surrogate'),
    lambda: remember('   ', 'blank'),
    lambda: remember('ok', 'w' * 501),
    lambda: remember('ok'),
    lambda: remember(text='ok', why='x', scope='global'),
    lambda: remember('first', 'fine'),
    lambda: remember('second', 'fine'),
    lambda: remember('third', 'over the per-turn limit'),
]
for attempt in attempts:
    try:
        print('OK', attempt())
    except Exception as exc:
        print('REFUSED', type(exc).__name__, exc)
SUBMIT(answer='survived')
"""


async def test_hostile_remember_arguments_are_refused_clearly_and_the_turn_goes_on(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    settings = make_settings(memory_max_proposals_per_turn=2, memory_max_entry_chars=100)
    service = FleetService(settings, database=Database(str(settings.database_url)))
    await service.start()
    try:
        model_server.script("root", rlm_step("Attack.", HOSTILE))
        await service.sessions.create(name="s")
        turn, _ = await service.turns.submit("s", TurnSubmission(message="x"))
        done = await service.turns.wait(turn.id)
        assert (done.status, done.answer) == ("completed", "survived")
        output = "".join(
            str(e.data["text"]) for e in await service.parts.store.events_after(turn.id) if e.type is EventType.OUTPUT
        )
        lines = output.splitlines()
        refusals = [line for line in lines if line.startswith("REFUSED")]
        expected = [
            "remember: text: Input should be a valid string",
            "remember: text is 5000 characters long; the most is 100",
            "remember: text contains U+0000 (a control character) at index 1;",
            "remember: text is not valid Unicode",
            "remember: text is empty",
            "remember: why is 501 characters long; the most is 500",
            "TypeError: missing a required argument: 'why'",  # bound by name before Fleet's check
            "remember: unexpected argument 'scope'",
            "remember: this turn already made 2 proposals",
        ]
        assert len(refusals) == len(expected), output
        for line, says in zip(refusals, expected, strict=True):
            assert line.startswith("REFUSED RuntimeError ") and says in line, line
            assert "TypeError" in says or line.startswith("REFUSED RuntimeError refused by Fleet: remember: ")
        assert [e.text for e in await service.memory.entries()] == ["first", "second"]
    finally:
        await service.stop()


async def test_a_full_review_queue_refuses_proposals_until_the_person_reviews(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    settings = make_settings(memory_max_pending=2)
    service = FleetService(settings, database=Database(str(settings.database_url)))
    await service.start()
    try:
        code = (
            "for text in ('one', 'two', 'three'):\n"
            "    try:\n        print(remember(text, ''))\n"
            "    except RuntimeError as exc:\n        print(exc)\n"
            "SUBMIT(answer='ok')"
        )
        model_server.script("root", rlm_step("Remember.", code))
        await run(service, "s", "x")
        turn = (await service.turns.in_session("s"))[-1]
        output = "".join(
            str(e.data["text"]) for e in await service.parts.store.events_after(turn.id) if e.type is EventType.OUTPUT
        )
        assert "2 proposals already wait for the person's review (the most is 2)" in output
        assert [e.text for e in await service.memory.entries()] == ["one", "two"]
    finally:
        await service.stop()


async def test_without_proposals_allowed_turns_get_no_remember_tool(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    settings = make_settings(memory_max_proposals_per_turn=0)
    service = FleetService(settings, database=Database(str(settings.database_url)))
    await service.start()
    try:
        model_server.script("root", rlm_step("Look.", "SUBMIT(answer=str('remember' in globals()))"))
        assert (await run(service, "s", "x"))[0] == "False"
    finally:
        await service.stop()


async def test_memory_past_its_budget_shows_the_newest_and_says_how_many_are_left_out(
    make_settings: SettingsFactory, model_server: ScriptedModelServer
) -> None:
    settings = make_settings(memory_max_chars=100)
    service = FleetService(settings, database=Database(str(settings.database_url)))
    await service.start()
    try:
        for n in range(1, 9):
            entry, _ = await service.parts.store.propose_memory(
                f"entry number {n} says something", "", session_id=None, turn_id=None, max_pending=100
            )
            await service.memory.approve(entry.id)
        model_server.script("root", rlm_step("Read.", READ_MEMORY))
        shown, _ = await run(service, "s", "x")
        assert "5 older entries are not shown (memory.max_chars is 100)." in shown
        assert shown.endswith(
            "- entry number 6 says something\n- entry number 7 says something\n- entry number 8 says something\n"
        )
    finally:
        await service.stop()


def entry(text: str) -> MemoryRecord:
    return MemoryRecord(id="mem_0", text=text, why="", status="approved")


def test_rendering_keeps_whole_entries_newest_last() -> None:
    assert render_memories([], 100) is None
    text = render_memories([entry("old"), entry("two\nlines"), entry("x" * 50)], 70)
    assert text is not None
    assert text.endswith("1 older entry is not shown (memory.max_chars is 70).\n\n- two\n  lines\n- " + "x" * 50 + "\n")
    assert render_memories([entry("x" * 200)], 100) == (
        "# Memory\n\nWhat the person approved to remember from earlier turns and sessions, oldest first.\n"
        "1 older entry is not shown (memory.max_chars is 100).\n\n"
    )
