"""Rendering a turn's events in a terminal: reasoning dimmed, code highlighted, output, tool calls.

Shared by ``fleet run`` and the interactive client. Deltas are printed as they arrive; the full
``reasoning``/``code`` events that follow them are then skipped so nothing shows twice.
"""

from __future__ import annotations

import json
from typing import IO, Any

from rich.console import Console
from rich.markdown import Markdown
from rich.padding import Padding
from rich.syntax import Syntax
from rich.text import Text

from fleet_rlm.engine.events import Event, EventType


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


class EventRenderer:
    """Prints events to a rich console; children are indented under their parent span."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._streamed: set[tuple[str, str]] = set()
        self._open_delta: str | None = None

    def _end_delta(self) -> None:
        if self._open_delta is not None:
            self.console.print()
            self._open_delta = None

    def render(self, event: Event) -> None:
        kind = event.type
        data = event.data
        if kind in (EventType.REASONING_DELTA, EventType.CODE_DELTA):
            field = "reasoning" if kind is EventType.REASONING_DELTA else "code"
            self._streamed.add((event.span_id, field))
            if self._open_delta != field:
                self._end_delta()
                self.console.print(Text("· thinking" if field == "reasoning" else "· writing code", style="dim"))
                self._open_delta = field
            self.console.print(Text(str(data.get("text", "")), style="dim" if field == "reasoning" else "cyan"), end="")
            return
        self._end_delta()
        if kind is EventType.TURN_STARTED:
            sandbox = data.get("sandbox", {})
            self.console.print(Text(f"▶ {data.get('task', '')}", style="bold"))
            self.console.print(
                Text(f"  sandbox {sandbox.get('backend')} (isolated: {sandbox.get('isolated')})", style="dim")
            )
        elif kind is EventType.ITERATION_STARTED:
            self.console.rule(Text(f"iteration {data.get('iteration')}/{data.get('max_iterations')}", style="dim"))
        elif kind is EventType.REASONING:
            if (event.span_id, "reasoning") not in self._streamed:
                self.console.print(Text(str(data.get("text", "")), style="dim italic"))
        elif kind is EventType.CODE:
            self.console.print(Syntax(str(data.get("code", "")), "python", theme="ansi_dark", line_numbers=False))
        elif kind is EventType.OUTPUT:
            style = "red" if data.get("stream") == "stderr" else ""
            self.console.print(Text(str(data.get("text", "")), style=style), end="")
        elif kind is EventType.TOOL_STARTED:
            self.console.print(Text(f"  ↳ {data.get('name')}({data.get('arguments', '')})", style="magenta"))
        elif kind is EventType.TOOL_FINISHED:
            status = f"failed: {data['error']}" if data.get("error") else "ok"
            self.console.print(Text(f"  ↲ {data.get('name')} {status} in {data.get('duration', 0):.2f}s", style="dim"))
        elif kind is EventType.ARTIFACT_CREATED:
            self.console.print(Text(f"  ✚ {data.get('path')} ({human_size(int(data.get('size', 0)))})", style="green"))
        elif kind is EventType.ROUTE_SELECTED:
            self.console.print(Text(f"  route: {data.get('route')} — {data.get('reason', '')}", style="dim"))
        elif kind is EventType.CHILD_STARTED:
            self.console.print(Text(f"  ⇢ child {data.get('child_id')}: {data.get('task', '')}", style="blue"))
        elif kind is EventType.CHILD_FINISHED:
            self.console.print(
                Text(
                    f"  ⇠ child {data.get('child_id')} {data.get('outcome')} in {data.get('duration', 0):.1f}s",
                    style="blue",
                )
            )
        elif kind in (EventType.WARNING, EventType.BUDGET_EXHAUSTED):
            message = data.get("message") or f"budget exhausted: {data.get('budget')} (limit {data.get('limit')})"
            self.console.print(Text(f"⚠ {message}", style="yellow"))
        elif kind is EventType.TURN_COMPLETED:
            self.console.rule(style="green")
            self.console.print(Markdown(str(data.get("answer") or "")))
            artifacts = data.get("artifacts") or []
            if artifacts:
                self.console.print(Text("Artifacts:", style="bold"))
                for artifact in artifacts:
                    self.console.print(
                        Padding(Text(f"{artifact['path']}  {human_size(int(artifact['size']))}"), (0, 2))
                    )
            self.console.print(Text(usage_line(data.get("usage") or {}), style="dim"))
        elif kind is EventType.TURN_FAILED:
            self.console.print(Text(f"✗ turn failed: {data.get('reason')}", style="bold red"))
        elif kind is EventType.TURN_CANCELLED:
            self.console.print(Text("✗ turn cancelled", style="bold yellow"))
        elif kind is EventType.TURN_INTERRUPTED:
            self.console.print(Text(f"✗ turn interrupted: {data.get('reason', '')}", style="bold yellow"))


def usage_line(usage: dict[str, Any]) -> str:
    return (
        f"{usage.get('iterations', 0)} iterations · {usage.get('model_calls', 0)} model calls · "
        f"{usage.get('input_tokens', 0)}→{usage.get('output_tokens', 0)} tokens · "
        f"{usage.get('sandbox_errors', 0)} code errors · {usage.get('duration', 0):.1f}s"
    )


def json_line(event: Event, stream: IO[str]) -> None:
    stream.write(json.dumps(event.to_dict(), ensure_ascii=False) + "\n")
    stream.flush()
