"""``fleet run``: one turn, headless, streamed to the terminal (or as JSON lines)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from rich.console import Console

from fleet_rlm.clients.cli.exit_codes import EXIT_FAILED, exit_code_for
from fleet_rlm.clients.cli.preparing import prepare_backend
from fleet_rlm.clients.cli.render import EventRenderer, json_line
from fleet_rlm.config import Settings
from fleet_rlm.engine.turn import TurnOutcome, TurnRequest, build_turn
from fleet_rlm.logs import log_to_file
from fleet_rlm.processes import pid_alive
from fleet_rlm.protocol.events import Event, new_id
from fleet_rlm.protocol.status import TurnStatus
from fleet_rlm.sandbox.base import SandboxLimits, SandboxUnavailable
from fleet_rlm.sandbox.registry import configured_backend
from fleet_rlm.sandbox.volume import remove_volume_directory
from fleet_rlm.workspace.copyout import CopyBudget, mib_bound
from fleet_rlm.workspace.layout import Workspace
from fleet_rlm.workspace.mirror import Mirror
from fleet_rlm.workspace.tree import SHARED_DIR_MODE


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
    verbose: bool = False,
) -> int:
    """Run one turn in this process; returns the exit code.

    The turn runs on a copy of the workspace in a volume of the sandbox's own (bounded in bytes and
    files where the host can); when it has ended and its sandboxes are gone, what it changed is
    copied back, owned by whoever runs ``fleet run``.
    """
    log_to_file(settings, verbose=verbose)
    turn_id = new_id("turn")
    home = prepare_workspace(settings, workspace_dir, files, turn_id)
    console = Console(highlight=False)
    renderer = EventRenderer(console)

    def sink(event: Event) -> None:
        if as_json:
            json_line(event, sys.stdout)
        else:
            renderer.render(event)

    backend = configured_backend(settings)
    try:
        prepare_backend(backend, Console(highlight=False, stderr=True))
    except SandboxUnavailable as exc:
        print(f"fleet: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    reap_stale_runs(settings.runs_dir)
    volume = backend.workspace_volume(
        settings.runs_dir / f"{os.getpid()}-{turn_id}", SandboxLimits.from_settings(settings.sandbox, settings.budget)
    )
    try:
        live = Workspace.create(volume.workspace, mode=SHARED_DIR_MODE)
        mirror = Mirror(home.tree, live.tree)
        mirror.copy_in()

        def copy_back() -> dict[str, str]:
            budget = CopyBudget(
                [mib_bound("the turn's", "sandbox.copy_out_turn_mb", settings.sandbox.copy_out_turn_mb)]
            )
            mirror.copy_back(budget)
            return budget.refused

        request = TurnRequest(
            task=task,
            workspace=live.root,
            turn_id=turn_id,
            context_paths=context_paths,
            mode=mode,
            after_sandboxes=copy_back,
        )
        turn = build_turn(settings, request, sink, backend=backend)
        outcome = asyncio.run(_run_with_ctrl_c(turn.run(), turn.cancel))
    finally:
        volume.release()
    if not as_json:
        console.print(f"[dim]workspace: {home.root}[/dim]")
    return exit_code(outcome)


def reap_stale_runs(runs_dir: Path) -> None:
    """Remove the volumes of ``fleet run`` processes that died without cleaning up."""
    if not runs_dir.is_dir():
        return
    for directory in runs_dir.iterdir():
        pid = directory.name.split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            remove_volume_directory(directory)


async def _run_with_ctrl_c(run: object, cancel: object) -> TurnOutcome:
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, cancel)  # type: ignore[arg-type]
    try:
        return await run  # type: ignore[misc,no-any-return]
    finally:
        loop.remove_signal_handler(signal.SIGINT)


def exit_code(outcome: TurnOutcome) -> int:
    reason = outcome.unverified_reason if outcome.status is TurnStatus.COMPLETED else outcome.error
    return exit_code_for(outcome.status, unverified=outcome.unverified, reason=reason)
