"""``fleet run``: one turn, headless, streamed to the terminal (or as JSON lines)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from rich.console import Console

from fleet_rlm.clients.cli.render import EventRenderer, json_line
from fleet_rlm.config import Settings
from fleet_rlm.engine.events import Event, new_id
from fleet_rlm.engine.turn import TurnOutcome, TurnRequest, build_turn
from fleet_rlm.logs import log_to_file
from fleet_rlm.workspace.layout import Workspace

EXIT_FAILED = 1
EXIT_CANCELLED = 130


def prepare_workspace(settings: Settings, workspace_dir: Path | None, files: list[Path], turn_id: str) -> Workspace:
    root = workspace_dir or settings.workspaces_dir / turn_id
    workspace = Workspace.create(root)
    for file in files:
        workspace.add_file(file)
    return workspace


def run_local(
    settings: Settings,
    task: str,
    *,
    files: list[Path],
    workspace_dir: Path | None,
    as_json: bool,
    context_paths: list[str],
    mode: str | None,
) -> int:
    """Run one turn in this process; returns the exit code."""
    log_to_file(settings)
    turn_id = new_id("turn")
    workspace = prepare_workspace(settings, workspace_dir, files, turn_id)
    console = Console(highlight=False)
    renderer = EventRenderer(console)

    def sink(event: Event) -> None:
        if as_json:
            json_line(event, sys.stdout)
        else:
            renderer.render(event)

    request = TurnRequest(task=task, workspace=workspace.root, turn_id=turn_id, context_paths=context_paths, mode=mode)
    turn = build_turn(settings, request, sink)
    outcome = asyncio.run(_run_with_ctrl_c(turn.run(), turn.cancel))
    if not as_json:
        console.print(f"[dim]workspace: {workspace.root}[/dim]")
    return exit_code(outcome)


async def _run_with_ctrl_c(run: object, cancel: object) -> TurnOutcome:
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, cancel)  # type: ignore[arg-type]
    try:
        return await run  # type: ignore[misc,no-any-return]
    finally:
        loop.remove_signal_handler(signal.SIGINT)


def exit_code(outcome: TurnOutcome) -> int:
    if outcome.status == "completed":
        return 0
    print(f"fleet: {outcome.status}: {outcome.error}", file=sys.stderr)
    return EXIT_CANCELLED if outcome.status == "cancelled" else EXIT_FAILED
