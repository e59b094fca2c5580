"""What the model is told of a session's kernel at the start of a turn: its live variables, or
what a fresh kernel restored and what is gone. Bounded like the workspace manifest."""

from __future__ import annotations

from fleet_rlm.sandbox.kernel_code import KernelVariableInfo, Lost
from fleet_rlm.workspace.manifest import human_size

MAX_SHOWN_VARIABLES = 40
MAX_KERNEL_TEXT = 4000


def _line(variable: KernelVariableInfo) -> str:
    line = f"- {variable.name}: {variable.type}, {human_size(variable.size)}"
    if variable.preview is not None:
        line += f" = {variable.preview}"
    return line


def _bounded(lines: list[str], total: int) -> str:
    shown: list[str] = []
    room = MAX_KERNEL_TEXT
    for index, line in enumerate(lines[:MAX_SHOWN_VARIABLES]):
        if len(line) + 1 > room:
            shown.append(f"- ... and {total - index} more")
            break
        shown.append(line)
        room -= len(line) + 1
    else:
        if total > len(shown):
            shown.append(f"- ... and {total - len(shown)} more")
    return "\n".join(shown)


def live_text(variables: list[KernelVariableInfo]) -> str:
    """What the model is told of a live kernel: the variables earlier turns left (bounded)."""
    if not variables:
        return ""
    listing = _bounded([_line(v) for v in variables], len(variables))
    return (
        "Python variables still defined from earlier turns (the sandbox kept them; use them directly "
        f"rather than re-reading files):\n{listing}"
    )


def restored_text(restored: list[KernelVariableInfo], lost: list[Lost], why: str) -> str:
    """What the model is told when the kernel of earlier turns ended: what is back, what is gone."""
    parts = [f"The Python state of earlier turns was lost because {why}; this is a fresh sandbox."]
    if restored:
        listing = _bounded([_line(v) for v in restored], len(restored))
        parts.append(f"Restored from the session's snapshot (use them directly):\n{listing}")
    if lost:
        listing = _bounded([f"- {item.name}: {item.reason}" for item in lost], len(lost))
        parts.append(f"Gone (recompute them if needed):\n{listing}")
    return "\n".join(parts)
