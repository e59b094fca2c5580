"""Rendering a turn's events in a terminal: reasoning dimmed, code highlighted, output, tool calls.

Shared by ``fleet run`` and the interactive client (``fleet chat``). Reasoning deltas are printed
as they arrive and the full ``reasoning`` event that follows them is then skipped, so nothing
shows twice. Code deltas are not printed (the model's raw text, fences and all): the code is
shown once, highlighted, from the ``code`` event; meanwhile :attr:`EventRenderer.draft` holds a
one-line preview of the code being written, for a live footer. Child agents are indented under
the parent that spawned them, following ``span_id`` / ``parent_span_id``. With ``line_buffered``
(used under a live footer, which can only sit below whole lines) streamed text is printed a line
at a time and the unfinished line is kept in :attr:`EventRenderer.pending`.
"""

from __future__ import annotations

import json
from typing import IO, Any

from rich.console import Console, RenderableType
from rich.markdown import Markdown
from rich.padding import Padding
from rich.rule import Rule
from rich.syntax import Syntax
from rich.text import Text

from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.protocol.visible import show_hidden
from fleet_rlm.workspace.manifest import human_size

INDENT_PER_LEVEL = 4
PREVIEW_CHARS = 80
MEMORY_PREVIEW_CHARS = 160


def preview(text: str, width: int = PREVIEW_CHARS) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[: width - 1] + "…"


class SpanLevels:
    """How deep in child agents each span sits: 0 for the turn's own work, 1 inside a child, ..."""

    def __init__(self) -> None:
        self._levels: dict[str, int] = {}

    def level_of(self, event: Event) -> int:
        """The level to draw ``event`` at (a ``child.started`` is drawn at its parent's level)."""
        if event.span_id in self._levels:
            known = self._levels[event.span_id]
            return known - 1 if event.type in (EventType.CHILD_STARTED, EventType.CHILD_FINISHED) else known
        parent = self._levels.get(event.parent_span_id or "", 0)
        own = parent + 1 if event.type is EventType.CHILD_STARTED else parent
        self._levels[event.span_id] = own
        return parent if event.type is EventType.CHILD_STARTED else own


class EventRenderer:
    """Prints events to a rich console; children are indented under their parent span."""

    def __init__(self, console: Console, *, line_buffered: bool = False) -> None:
        self.console = console
        self.line_buffered = line_buffered
        self.levels = SpanLevels()
        self.pending = Text()
        self.draft = Text()
        self._drafts: dict[str, str] = {}
        self._pending_indent = 0
        self._streamed: set[tuple[str, str]] = set()
        self._open_stream: tuple[str, str] | None = None
        self._at_line_start = True
        self._tool_arguments: dict[str, str] = {}

    def _print(self, renderable: RenderableType, level: int) -> None:
        indent = level * INDENT_PER_LEVEL
        self.console.print(Padding(renderable, (0, 0, 0, indent)) if indent else renderable)

    def _end_stream(self) -> None:
        if self._open_stream is None:
            return
        if self.line_buffered:
            if self.pending.plain:
                self._print(self.pending, self._pending_indent)
            self.pending = Text()
        elif not self._at_line_start:
            self.console.print()
        self._at_line_start = True
        self._open_stream = None

    def flush(self) -> None:
        """Print the unfinished streamed line, if any (the stream ended or broke mid-line)."""
        self._end_stream()

    def _stream(self, key: tuple[str, str], text: str, style: str, level: int, heading: str | None) -> None:
        if self._open_stream != key:
            self._end_stream()
            if heading:
                self._print(Text(heading, style="dim"), level)
            self._open_stream = key
            self._pending_indent = level
        if not self.line_buffered:
            if level:
                margin = " " * (level * INDENT_PER_LEVEL)
                text = (margin if self._at_line_start else "") + text.replace("\n", "\n" + margin)
                text = text.removesuffix(margin) if text.endswith("\n" + margin) else text
            if text:
                self.console.print(Text(text, style=style), end="")
                self._at_line_start = text.endswith("\n")
            return
        *lines, rest = (self.pending.plain + text).split("\n")
        # The footer shows ``pending``: it must hold no finished line while those lines print.
        self.pending = Text(rest, style=style)
        for line in lines:
            self._print(Text(line, style=style), level)

    def _draft_code(self, span_id: str, text: str, level: int) -> None:
        if span_id not in self._drafts:
            self._end_stream()
            self._print(Text("· writing code", style="dim"), level)
        draft = self._drafts[span_id] = self._drafts.get(span_id, "") + text
        lines = [line for line in draft.splitlines() if line.strip() and not line.startswith("```")]
        self.draft = Text(f"✎ {len(lines)} line(s): {preview(lines[-1]) if lines else ''}", style="cyan")

    def render(self, event: Event) -> None:
        kind = event.type
        data = event.data
        level = self.levels.level_of(event)
        if kind is EventType.REASONING_DELTA:
            self._streamed.add((event.span_id, "reasoning"))
            self._stream((event.span_id, "reasoning"), str(data.get("text", "")), "dim", level, "· thinking")
            return
        if kind is EventType.CODE_DELTA:
            self._draft_code(event.span_id, str(data.get("text", "")), level)
            return
        if kind is EventType.OUTPUT:
            style = "red" if data.get("stream") == "stderr" else ""
            self._stream((event.span_id, f"output:{data.get('stream')}"), str(data.get("text", "")), style, level, None)
            return
        self._end_stream()
        for renderable in self._renderables(event):
            self._print(renderable, level)

    def _renderables(self, event: Event) -> list[RenderableType]:
        kind = event.type
        data = event.data
        if kind is EventType.TURN_STARTED:
            sandbox = data.get("sandbox", {})
            return [
                Text(f"▶ {data.get('task', '')}", style="bold"),
                Text(f"  sandbox {sandbox.get('backend')} (isolated: {sandbox.get('isolated')})", style="dim"),
            ]
        if kind is EventType.ITERATION_STARTED:
            return [Rule(Text(f"iteration {data.get('iteration')}/{data.get('max_iterations')}", style="dim"))]
        if kind is EventType.REASONING:
            if (event.span_id, "reasoning") in self._streamed:
                return []
            return [Text(str(data.get("text", "")), style="dim italic")]
        if kind is EventType.CODE:
            self.draft = Text()
            # Wrapped, not cropped: a person must be able to read every character of the code that runs.
            code = str(data.get("code", ""))
            return [Syntax(code, "python", theme="ansi_dark", line_numbers=False, word_wrap=True)]
        if kind is EventType.TOOL_STARTED:
            self._tool_arguments[str(data.get("call_id"))] = str(data.get("arguments", ""))
            return []
        if kind is EventType.TOOL_FINISHED:
            arguments = preview(self._tool_arguments.pop(str(data.get("call_id")), ""))
            status = f"failed: {data['error']}" if data.get("error") else ""
            line = Text(f"  ↳ {data.get('name')}({arguments})", style="magenta")
            line.append(f" {data.get('duration', 0):.2f}s", style="dim")
            if status:
                line.append(f" {status}", style="red")
            return [line]
        if kind is EventType.ARTIFACT_CREATED:
            return [Text(f"  ✚ {data.get('path')} ({human_size(int(data.get('size', 0)))})", style="green")]
        if kind is EventType.MEMORY_PROPOSED:
            return [
                Text(
                    f"  ✎ remembered (pending review): {preview(show_hidden(str(data.get('text', ''))), MEMORY_PREVIEW_CHARS)}",
                    style="cyan",
                )
            ]
        if kind is EventType.ROUTE_SELECTED:
            return [Text(f"  route: {data.get('route')} — {data.get('reason', '')}", style="dim")]
        if kind is EventType.CHILD_STARTED:
            return [Text(f"  ⇢ child {data.get('child_id')}: {preview(str(data.get('task', '')))}", style="blue")]
        if kind is EventType.CHILD_FINISHED:
            outcome = f"{data.get('outcome')} in {data.get('duration', 0):.1f}s"
            return [Text(f"  ⇠ child {data.get('child_id')} {outcome}", style="blue")]
        if kind in (EventType.WARNING, EventType.BUDGET_EXHAUSTED):
            message = data.get("message") or f"budget exhausted: {data.get('budget')} (limit {data.get('limit')})"
            return [Text(f"⚠ {message}", style="yellow")]
        if kind is EventType.EXECUTION_FAILED:
            return execution_failure(data)
        if kind is EventType.SANDBOX_RESTARTED:
            return [Text(restart_line(data), style="bold yellow")]
        if kind is EventType.TURN_COMPLETED:
            shown: list[RenderableType] = [Rule(style="yellow" if data.get("unverified") else "green")]
            if data.get("unverified"):
                shown.append(Text(f"⚠ unverified answer: {data.get('unverified_reason')}", style="bold yellow"))
            shown.append(Markdown(str(data.get("answer") or "")))
            shown.extend(evidence_lines(data.get("evidence") or []))
            artifacts = data.get("artifacts") or []
            if artifacts:
                shown.append(Text("Artifacts:", style="bold"))
                shown.extend(Padding(Text(f"{a['path']}  {human_size(int(a['size']))}"), (0, 2)) for a in artifacts)
            shown.append(Text(usage_line(data.get("usage") or {}), style="dim"))
            return shown
        if kind is EventType.TURN_INCOMPLETE:
            return [
                Rule(style="yellow"),
                Text(f"◐ turn incomplete: {data.get('reason')}", style="bold yellow"),
                Text(usage_line(data.get("usage") or {}), style="dim"),
            ]
        if kind is EventType.TURN_FAILED:
            return [Text(f"✗ turn failed: {data.get('reason')}", style="bold red")]
        if kind is EventType.TURN_CANCELLED:
            return [Text("✗ turn cancelled", style="bold yellow")]
        if kind is EventType.TURN_INTERRUPTED:
            return [Text(f"✗ turn interrupted: {data.get('reason', '')}", style="bold yellow")]
        return []


def evidence_lines(evidence: list[Any]) -> list[RenderableType]:
    """The printed lines that support an answer, under it and dimmed; they are sandbox output, so every
    character that would hide, reorder or control what the terminal shows is escaped (``\\x1b`` too)."""
    if not evidence:
        return []
    lines = "\n".join(show_hidden(" ".join(str(line).splitlines())) for line in evidence)
    return [Text("Evidence:", style="dim bold"), Padding(Text(lines, style="dim"), (0, 2))]


def execution_failure(data: dict[str, Any]) -> list[RenderableType]:
    """A failed execution, under its code: the error in red, then the traceback the model saw, dimmed."""
    where = f" (line {data['line']})" if data.get("line") else ""
    shown: list[RenderableType] = [
        Text(f"✗ {data.get('error_type')}: {data.get('message', '')}{where}", style="bold red")
    ]
    lines = str(data.get("traceback") or "").splitlines()
    if len(lines) > 1:  # the last line repeats the error
        shown.append(Padding(Text("\n".join(lines[:-1]), style="red dim"), (0, 2)))
    return shown


def restart_line(data: dict[str, Any]) -> str:
    """A ``sandbox.restarted`` event in one line."""
    restart = f"{data.get('restart')}/{data.get('max_restarts')}"
    return f"↻ sandbox restarted ({restart}) after {data.get('cause')}: variables lost, files kept"


def usage_line(usage: dict[str, Any]) -> str:
    return (
        f"{usage.get('iterations', 0)} iterations · {usage.get('model_calls', 0)} model calls · "
        f"{usage.get('input_tokens', 0)}→{usage.get('output_tokens', 0)} tokens · "
        f"{usage.get('sandbox_errors', 0)} code errors · {usage.get('duration', 0):.1f}s"
    )


def json_line(event: Event, stream: IO[str]) -> None:
    stream.write(json.dumps(event.to_dict(), ensure_ascii=False) + "\n")
    stream.flush()
