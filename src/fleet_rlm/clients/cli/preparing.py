"""Getting the sandbox backend ready before a command needs it (building the sandbox environment the
first time), with a progress bar on a terminal and a line per step elsewhere; nothing when it is ready."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as ProgressBar

from fleet_rlm.config import Settings
from fleet_rlm.sandbox.progress import BuildProgress

if TYPE_CHECKING:  # the sandbox seam loads DSPy; `fleet chat` gets ready without it
    from fleet_rlm.sandbox.base import SandboxBackend

TITLE = "sandbox environment"


class BuildDisplay:
    """Shows build progress as it comes: it appears at the first step, so a ready environment shows nothing."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar: ProgressBar | None = None
        self.last = ""

    def __call__(self, step: BuildProgress) -> None:
        if not self.console.is_terminal:
            if step.message != self.last:
                self.console.print(f"{TITLE} [{step.done}/{step.total}]: {step.message}", highlight=False)
            self.last = step.message
            return
        if self.bar is None:
            self.bar = ProgressBar(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[step]}", markup=False),
                console=self.console,
            )
            self.bar.add_task(TITLE, total=step.total, step="")
            self.bar.start()
        self.bar.update(self.bar.task_ids[0], completed=step.done, total=step.total, step=step.message)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def prepare_backend(backend: SandboxBackend, console: Console) -> None:
    """``backend.prepare()`` with its progress shown on ``console``. Raises SandboxUnavailable."""
    display = BuildDisplay(console)
    try:
        backend.prepare(display)
    finally:
        display.close()


def prepare_local_environment(settings: Settings, console: Console) -> str | None:
    """Build the local backend's sandbox environment if it is not built yet, without loading the
    sandbox seam (for ``fleet chat``, before it starts a server that would otherwise build it while the
    chat waits). Returns why it failed, or None."""
    if settings.sandbox.backend != "local":
        return None
    from fleet_rlm.sandbox.environment import EnvironmentBuildError, EnvironmentSpec, ensure_environment

    display = BuildDisplay(console)
    try:
        ensure_environment(EnvironmentSpec.from_settings(settings.sandbox), display)
    except (EnvironmentBuildError, OSError) as exc:
        return f"the sandbox environment could not be built: {exc}"
    finally:
        display.close()
    return None
