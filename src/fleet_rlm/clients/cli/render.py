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
from fleet_rlm.protocol.payloads import (
    ArtifactCreated,
    BudgetExhausted,
    ChildFinished,
    ChildStarted,
    Code,
    CodeDelta,
    ExecutionFailed,
    IterationStarted,
    MemoryProposed,
    NoUsage,
    Output,
    Payload,
    Reasoning,
    ReasoningDelta,
    RouteSelected,
    SandboxRestarted,
    ToolFinished,
    ToolStarted,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    TurnIncomplete,
    TurnInterrupted,
    TurnStarted,
    TurnWarning,
    Usage,
)
from fleet_rlm.protocol.visible import show_hidden
from fleet_rlm.workspace.manifest import human_size

INDENT_PER_LEVEL = 4
PREVIEW_CHARS = 80
MEMORY_PREVIEW_CHARS = 160
NOTHING_USED = Usage(
    route=None, model_calls=0, root_calls=0, sub_calls=0, child_calls=0, children=0,
    input_tokens=0, output_tokens=0, iterations=0, sandbox_errors=0, duration=0.0,
)  # fmt: skip
"""The usage of a turn that ended before it ran."""


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
        if event.type is EventType.HEARTBEAT:
            return
        payload = event.payload
        level = self.levels.level_of(event)
        match payload:
            case ReasoningDelta(text=text):
                self._streamed.add((event.span_id, "reasoning"))
                self._stream((event.span_id, "reasoning"), text, "dim", level, "· thinking")
                return
            case CodeDelta(text=text):
                self._draft_code(event.span_id, text, level)
                return
            case Output(stream=stream, text=text):
                self._stream(
                    (event.span_id, f"output:{stream}"), text, "red" if stream == "stderr" else "", level, None
                )
                return
        self._end_stream()
        for renderable in self._renderables(event, payload):
            self._print(renderable, level)

    def _renderables(self, event: Event, payload: Payload) -> list[RenderableType]:
        match payload:
            case TurnStarted(task=task, sandbox=sandbox):
                return [
                    Text(f"▶ {task}", style="bold"),
                    Text(f"  sandbox {sandbox.backend} (isolated: {sandbox.isolated})", style="dim"),
                ]
            case IterationStarted(iteration=iteration, max_iterations=most):
                return [Rule(Text(f"iteration {iteration}/{most}", style="dim"))]
            case Reasoning(text=text):
                return [] if (event.span_id, "reasoning") in self._streamed else [Text(text, style="dim italic")]
            case Code(code=code):
                self.draft = Text()
                # Wrapped, not cropped: a person must be able to read every character of the code that runs.
                return [Syntax(code, "python", theme="ansi_dark", line_numbers=False, word_wrap=True)]
            case ToolStarted(call_id=call_id, arguments=arguments):
                self._tool_arguments[call_id] = arguments
                return []
            case ToolFinished(call_id=call_id, name=name, duration=duration, error=error):
                line = Text(f"  ↳ {name}({preview(self._tool_arguments.pop(call_id, ''))})", style="magenta")
                line.append(f" {duration:.2f}s", style="dim")
                if error:
                    line.append(f" failed: {error}", style="red")
                return [line]
            case ArtifactCreated():
                return [Text(f"  {artifact_line(payload)}", style="green")]
            case MemoryProposed():
                return [Text(f"  {memory_line(payload, MEMORY_PREVIEW_CHARS)}", style="cyan")]
            case RouteSelected():
                return [Text(f"  {route_line(payload)}", style="dim")]
            case ChildStarted(child_id=child_id, task=task):
                return [Text(f"  ⇢ child {child_id}: {preview(task)}", style="blue")]
            case ChildFinished(child_id=child_id, outcome=outcome, duration=duration):
                return [Text(f"  ⇠ child {child_id} {outcome} in {duration:.1f}s", style="blue")]
            case TurnWarning() | BudgetExhausted():
                return [Text(f"⚠ {warning_text(payload)}", style="yellow")]
            case ExecutionFailed():
                return execution_failure(payload)
            case SandboxRestarted():
                return [Text(restart_line(payload), style="bold yellow")]
            case TurnCompleted():
                return completed_lines(payload)
            case TurnIncomplete(reason=reason, usage=usage):
                return [
                    Rule(style="yellow"),
                    Text(f"◐ turn incomplete: {reason}", style="bold yellow"),
                    Text(usage_line(usage), style="dim"),
                ]
            case TurnFailed(reason=reason):
                return [Text(f"✗ turn failed: {reason}", style="bold red")]
            case TurnCancelled():
                return [Text("✗ turn cancelled", style="bold yellow")]
            case TurnInterrupted(reason=reason):
                return [Text(f"✗ turn interrupted: {reason}", style="bold yellow")]
        return []


def completed_lines(payload: TurnCompleted) -> list[RenderableType]:
    """A completed turn: its answer (flagged when unverified), the evidence, the artifacts, the usage."""
    shown: list[RenderableType] = [Rule(style="yellow" if payload.unverified else "green")]
    if payload.unverified:
        shown.append(Text(f"⚠ unverified answer: {payload.unverified_reason}", style="bold yellow"))
    shown.append(Markdown(payload.answer))
    shown.extend(evidence_lines(payload.evidence))
    if payload.artifacts:
        shown.append(Text("Artifacts:", style="bold"))
        shown.extend(Padding(Text(f"{a.path}  {human_size(a.size)}"), (0, 2)) for a in payload.artifacts)
    shown.append(Text(usage_line(payload.usage), style="dim"))
    return shown


def evidence_lines(evidence: list[Any]) -> list[RenderableType]:
    """The printed lines that support an answer, under it and dimmed; they are sandbox output, so every
    character that would hide, reorder or control what the terminal shows is escaped (``\\x1b`` too)."""
    if not evidence:
        return []
    lines = "\n".join(show_hidden(" ".join(str(line).splitlines())) for line in evidence)
    return [Text("Evidence:", style="dim bold"), Padding(Text(lines, style="dim"), (0, 2))]


def execution_failure(payload: ExecutionFailed) -> list[RenderableType]:
    """A failed execution, under its code: the error in red, then the traceback the model saw, dimmed."""
    where = f" (line {payload.line})" if payload.line else ""
    shown: list[RenderableType] = [Text(f"✗ {payload.error_type}: {payload.message}{where}", style="bold red")]
    lines = payload.traceback.splitlines()
    if len(lines) > 1:  # the last line repeats the error
        shown.append(Padding(Text("\n".join(lines[:-1]), style="red dim"), (0, 2)))
    return shown


def restart_line(payload: SandboxRestarted) -> str:
    return (
        f"↻ sandbox restarted ({payload.restart}/{payload.max_restarts}) after {payload.cause}: "
        "variables lost, files kept"
    )


def artifact_line(payload: ArtifactCreated) -> str:
    return f"✚ {payload.path} ({human_size(payload.size)})"


def memory_line(payload: MemoryProposed, width: int = PREVIEW_CHARS) -> str:
    return f"✎ remembered (pending review): {preview(show_hidden(payload.text), width)}"


def route_line(payload: RouteSelected) -> str:
    return f"route: {payload.route} — {payload.reason}"


def warning_text(payload: TurnWarning | BudgetExhausted) -> str:
    if isinstance(payload, TurnWarning):
        return payload.message
    return f"budget exhausted: {payload.budget} (limit {payload.limit})"


def usage_line(usage: Usage | NoUsage | None) -> str:
    """A turn's usage in one line; a turn that never ran shows zeros."""
    if not isinstance(usage, Usage):
        usage = NOTHING_USED
    return (
        f"{usage.iterations} iterations · {usage.model_calls} model calls · "
        f"{usage.input_tokens}→{usage.output_tokens} tokens · "
        f"{usage.sandbox_errors} code errors · {usage.duration:.1f}s"
    )


def json_line(event: Event, stream: IO[str]) -> None:
    stream.write(json.dumps(event.to_dict(), ensure_ascii=False) + "\n")
    stream.flush()
