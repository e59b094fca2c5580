"""``/trace``: a finished (or running) turn's events drawn as a tree of spans.

Iterations, tool calls and child agents are branches (each opens a span); reasoning, code, output,
artifacts and warnings are leaves of the span they happened in; the terminal event closes the tree
with the usage.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.syntax import Syntax
from rich.text import Text
from rich.tree import Tree

from fleet_rlm.clients.cli.render import preview, restart_line, usage_line
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.protocol.visible import show_hidden
from fleet_rlm.workspace.manifest import human_size

OUTPUT_LINES = 20


def trace_tree(events: Iterable[Event], title: str) -> Tree:
    root = Tree(Text(title, style="bold"))
    nodes: dict[str, Tree] = {}
    outputs: dict[str, list[str]] = {}

    def node_for(event: Event) -> Tree:
        if event.span_id in nodes:
            return nodes[event.span_id]
        parent = nodes.get(event.parent_span_id or "", root)
        return parent

    for event in events:
        data = event.data
        kind = event.type
        if kind in (EventType.REASONING_DELTA, EventType.CODE_DELTA, EventType.HEARTBEAT):
            continue
        if kind is EventType.OUTPUT:
            outputs.setdefault(event.span_id, []).append(str(data.get("text", "")))
            continue
        _flush_output(nodes, outputs)
        if kind is EventType.TURN_STARTED:
            nodes[event.span_id] = root
            root.add(Text(f"task: {preview(str(data.get('task', '')), 100)}", style="dim"))
        elif kind is EventType.ITERATION_STARTED:
            label = Text(f"iteration {data.get('iteration')}/{data.get('max_iterations')}", style="bold")
            nodes[event.span_id] = node_for(event).add(label)
        elif kind is EventType.TOOL_STARTED:
            label = Text(f"{data.get('name')}({preview(str(data.get('arguments', '')))})", style="magenta")
            nodes[event.span_id] = node_for(event).add(label)
        elif kind is EventType.TOOL_FINISHED:
            status = f" failed: {data['error']}" if data.get("error") else ""
            node = node_for(event)
            if isinstance(node.label, Text):
                node.label = Text.assemble(node.label, (f"  {float(data.get('duration', 0)):.2f}s{status}", "dim"))
        elif kind is EventType.CHILD_STARTED:
            label = Text(f"child {data.get('child_id')}: {preview(str(data.get('task', '')))}", style="blue")
            nodes[event.span_id] = node_for(event).add(label)
        elif kind is EventType.CHILD_FINISHED:
            node_for(event).add(Text(f"{data.get('outcome')} in {float(data.get('duration', 0)):.1f}s", style="blue"))
        elif kind is EventType.REASONING:
            node_for(event).add(Text(str(data.get("text", "")), style="dim italic"))
        elif kind is EventType.CODE:
            node_for(event).add(Syntax(str(data.get("code", "")), "python", theme="ansi_dark"))
        elif kind is EventType.ARTIFACT_CREATED:
            node_for(event).add(Text(f"✚ {data.get('path')} ({human_size(int(data.get('size', 0)))})", style="green"))
        elif kind is EventType.MEMORY_PROPOSED:
            node_for(event).add(
                Text(f"✎ remembered (pending review): {preview(show_hidden(str(data.get('text', ''))))}", "cyan")
            )
        elif kind is EventType.ROUTE_SELECTED:
            node_for(event).add(Text(f"route: {data.get('route')} — {data.get('reason', '')}", style="dim"))
        elif kind is EventType.SANDBOX_RESTARTED:
            node_for(event).add(Text(restart_line(data), style="yellow"))
        elif kind in (EventType.WARNING, EventType.BUDGET_EXHAUSTED):
            message = data.get("message") or f"budget exhausted: {data.get('budget')} (limit {data.get('limit')})"
            node_for(event).add(Text(f"⚠ {message}", style="yellow"))
        elif event.terminal:
            outcome = kind.value.removeprefix("turn.")
            reason = data.get("reason")
            root.add(Text(f"{outcome}" + (f": {reason}" if reason else ""), style="bold"))
            root.add(Text(usage_line(data.get("usage") or {}), style="dim"))
    _flush_output(nodes, outputs)
    return root


def _flush_output(nodes: dict[str, Tree], outputs: dict[str, list[str]]) -> None:
    """Output gathered per span becomes one leaf once something else happens."""
    for span in list(outputs):
        text = "".join(outputs.pop(span)).rstrip("\n")
        lines = text.splitlines()
        if len(lines) > OUTPUT_LINES:
            lines = [*lines[:OUTPUT_LINES], f"… {len(lines) - OUTPUT_LINES} more line(s)"]
        if span in nodes:
            nodes[span].add(Text("\n".join(lines)))
