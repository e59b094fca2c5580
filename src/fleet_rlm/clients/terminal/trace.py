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

from fleet_rlm.clients.cli.render import (
    artifact_line,
    memory_line,
    preview,
    restart_line,
    route_line,
    usage_line,
    warning_text,
)
from fleet_rlm.protocol.events import Event, EventType
from fleet_rlm.protocol.payloads import (
    ArtifactCreated,
    BudgetExhausted,
    ChildFinished,
    ChildStarted,
    Code,
    IterationStarted,
    MemoryProposed,
    Output,
    Reasoning,
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
)

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
        if event.type in (EventType.REASONING_DELTA, EventType.CODE_DELTA, EventType.HEARTBEAT):
            continue
        payload = event.payload
        if isinstance(payload, Output):
            outputs.setdefault(event.span_id, []).append(payload.text)
            continue
        _flush_output(nodes, outputs)
        match payload:
            case TurnStarted(task=task):
                nodes[event.span_id] = root
                root.add(Text(f"task: {preview(task, 100)}", style="dim"))
            case IterationStarted(iteration=iteration, max_iterations=most):
                nodes[event.span_id] = node_for(event).add(Text(f"iteration {iteration}/{most}", style="bold"))
            case ToolStarted(name=name, arguments=arguments):
                nodes[event.span_id] = node_for(event).add(Text(f"{name}({preview(arguments)})", style="magenta"))
            case ToolFinished(duration=duration, error=error):
                node = node_for(event)
                if isinstance(node.label, Text):
                    status = f" failed: {error}" if error else ""
                    node.label = Text.assemble(node.label, (f"  {duration:.2f}s{status}", "dim"))
            case ChildStarted(child_id=child_id, task=task):
                nodes[event.span_id] = node_for(event).add(Text(f"child {child_id}: {preview(task)}", style="blue"))
            case ChildFinished(outcome=outcome, duration=duration):
                node_for(event).add(Text(f"{outcome} in {duration:.1f}s", style="blue"))
            case Reasoning(text=text):
                node_for(event).add(Text(text, style="dim italic"))
            case Code(code=code):
                node_for(event).add(Syntax(code, "python", theme="ansi_dark"))
            case ArtifactCreated():
                node_for(event).add(Text(artifact_line(payload), style="green"))
            case MemoryProposed():
                node_for(event).add(Text(memory_line(payload), "cyan"))
            case RouteSelected():
                node_for(event).add(Text(route_line(payload), style="dim"))
            case SandboxRestarted():
                node_for(event).add(Text(restart_line(payload), style="yellow"))
            case TurnWarning() | BudgetExhausted():
                node_for(event).add(Text(f"⚠ {warning_text(payload)}", style="yellow"))
            case TurnCompleted(usage=usage):
                root.add(Text("completed", style="bold"))
                root.add(Text(usage_line(usage), style="dim"))
            case (
                TurnIncomplete(reason=reason, usage=usage)
                | TurnFailed(reason=reason, usage=usage)
                | TurnCancelled(reason=reason, usage=usage)
                | TurnInterrupted(reason=reason, usage=usage)
            ):
                ending = event.type.value.removeprefix("turn.")
                root.add(Text(f"{ending}: {reason}" if reason else ending, style="bold"))
                root.add(Text(usage_line(usage), style="dim"))
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
