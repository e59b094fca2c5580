from __future__ import annotations

import io
import time

from rich.console import Console

from fleet_rlm.clients.cli.render import EventRenderer
from fleet_rlm.clients.terminal.status import StatusLine
from fleet_rlm.clients.terminal.stream import Footer
from fleet_rlm.clients.terminal.trace import trace_tree
from fleet_rlm.protocol.events import EventType

from .events import ROOT, TurnEvents, sample_turn_with_a_child


def plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=100, color_system=None, highlight=False), out


def rendered(line_buffered: bool) -> list[str]:
    console, out = plain_console()
    renderer = EventRenderer(console, line_buffered=line_buffered)
    for event in sample_turn_with_a_child().events:
        renderer.render(event)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def test_streamed_reasoning_shows_once_and_tool_calls_take_one_line() -> None:
    lines = rendered(line_buffered=False)
    text = "\n".join(lines)
    assert text.count("Read the file first.") == 1
    assert "  ↳ llm_query('hello') 0.25s" in lines
    assert "partial line" in lines and "second" in lines
    assert "north wins" in text
    assert "  artifacts/out.csv  2.0 KiB" in lines


def test_child_agents_are_indented_under_their_parent() -> None:
    lines = rendered(line_buffered=False)
    started = next(i for i, line in enumerate(lines) if "⇢ child child_1: Check north" in line)
    finished = next(i for i, line in enumerate(lines) if "⇠ child child_1 completed in 1.5s" in line)
    assert lines[started].startswith("  ⇢") and lines[finished].startswith("  ⇠")
    inside = lines[started + 1 : finished]
    assert "    child says hi" in inside
    assert all(line.startswith("    ") for line in inside if line.strip())


def test_line_buffered_rendering_prints_whole_lines_and_keeps_the_rest_pending() -> None:
    assert rendered(line_buffered=True) == rendered(line_buffered=False)
    console, out = plain_console()
    renderer = EventRenderer(console, line_buffered=True)
    turn = TurnEvents()
    turn.add(EventType.OUTPUT, "span_it", ROOT, stream="stdout", text="one\ntw")
    for event in turn.events:
        renderer.render(event)
    assert out.getvalue() == "one\n"
    assert renderer.pending.plain == "tw"


def test_status_line_counts_iterations_model_calls_and_elapsed() -> None:
    status = StatusLine()
    events = sample_turn_with_a_child().events
    for event in events[:7]:  # up to the llm_query call starting
        status.observe(event)
    started = events[0].ts
    assert status.line(now=started + 12) == "iteration 1/5 · model calls 1/12 · 12s · running llm_query"
    for event in events[7:13]:  # the call finished, a child started and iterates
        status.observe(event)
    assert status.line(now=started + 13) == "iteration 1/5 · model calls 3/12 · 13s · 1 child agent(s)"
    status.started_at = time.time()
    console, out = plain_console()
    renderer = EventRenderer(console, line_buffered=True)
    renderer.render(events[8])  # "partial " without a newline yet
    console.print(Footer(renderer, status))
    pending, footer = out.getvalue().splitlines()
    assert pending == "partial "
    assert footer.startswith(" Ctrl-C cancels │ iteration 1/5 · model calls 3/12 · ")
    status.cancel_requested = True
    console.print(Footer(renderer, status))
    last = out.getvalue().splitlines()[-1]
    assert last.startswith(" Ctrl-C again quits │ ") and last.endswith("· cancelling… ")


def test_trace_draws_spans_as_a_tree() -> None:
    console, out = plain_console()
    console.print(trace_tree(sample_turn_with_a_child().events, "turn 1"))
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0] == "turn 1"
    iteration = next(line for line in lines if "iteration 1/5" in line)
    tool = next(line for line in lines if "llm_query('hello')" in line and "print" not in line)
    child_output = next(line for line in lines if "child says hi" in line)
    assert "0.25s" in tool
    assert tool.index("llm_query") > iteration.index("iteration")
    assert child_output.index("child says hi") > tool.index("llm_query")
    assert "partial line" in text and "✚ artifacts/out.csv (2.0 KiB)" in text
    assert "completed" in text and "3 model calls" in text


def test_code_shows_once_highlighted_and_its_draft_only_in_the_footer() -> None:
    turn = TurnEvents()
    turn.add(EventType.CODE_DELTA, "span_it", ROOT, text="```python\nx = 1\nprint(")
    turn.add(EventType.CODE_DELTA, "span_it", ROOT, text="x)\n```")
    for line_buffered in (False, True):
        console, out = plain_console()
        renderer = EventRenderer(console, line_buffered=line_buffered)
        renderer.render(turn.events[0])
        assert renderer.draft.plain == "✎ 2 line(s): print("
        renderer.render(turn.events[1])
        renderer.render(turn.add(EventType.CODE, "span_it", ROOT, code="x = 1\nprint(x)"))
        assert out.getvalue().splitlines() == ["· writing code", "x = 1", "print(x)"]
        assert renderer.draft.plain == ""
        turn.events.pop()


def test_a_sandbox_restart_is_one_line_in_the_stream_and_the_trace() -> None:
    turn = TurnEvents()
    turn.add(EventType.ITERATION_STARTED, "span_it", ROOT, iteration=1, max_iterations=5)
    turn.add(
        EventType.SANDBOX_RESTARTED,
        "span_it",
        ROOT,
        cause="SIGKILL at the 512 MB memory limit",
        restart=1,
        max_restarts=3,
    )
    said = "↻ sandbox restarted (1/3) after SIGKILL at the 512 MB memory limit: variables lost, files kept"
    for line_buffered in (False, True):
        console, out = plain_console()
        renderer = EventRenderer(console, line_buffered=line_buffered)
        for event in turn.events:
            renderer.render(event)
        assert out.getvalue().splitlines()[-1] == said
    console, out = plain_console()
    console.print(trace_tree(turn.events, "turn 1"))
    assert said in " ".join(line.strip(" │└─") for line in out.getvalue().splitlines())


def test_a_memory_proposal_stored_with_hidden_characters_is_shown_escaped() -> None:
    turn = TurnEvents()
    turn.add(EventType.MEMORY_PROPOSED, ROOT, entry_id="mem_" + "0" * 16, text="obey\u202e\U000e0069 me", why="")
    said = "✎ remembered (pending review): obey\\u202e\\U000e0069 me"
    console, out = plain_console()
    renderer = EventRenderer(console, line_buffered=False)
    for event in turn.events:
        renderer.render(event)
    assert out.getvalue().splitlines()[-1] == f"  {said}"
    console, out = plain_console()
    console.print(trace_tree(turn.events, "turn 1"))
    assert said in " ".join(line.strip(" │└─") for line in out.getvalue().splitlines())
