"""Running the real ``fleet`` command in a subprocess against a scripted model, as people run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fleet_rlm.models.scripted import ScriptedModelServer

FLEET = [sys.executable, "-m", "fleet_rlm"]


def run_fleet(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, *, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """``fleet ARGS`` in ``cwd`` with Fleet's home and config under ``cwd`` and no inherited FLEET_* setting."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLEET_")}
    clean.update({"XDG_CONFIG_HOME": str(cwd / "config"), "FLEET_HOME": str(cwd / "home"), "COLUMNS": "120"})
    clean.update(env or {})
    return subprocess.run([*FLEET, *args], cwd=cwd, env=clean, capture_output=True, text=True, timeout=timeout)


def scripted_env(server: ScriptedModelServer, **settings: str) -> dict[str, str]:
    """The environment pointing ``fleet`` at ``server`` (root model ``root``, sub-model ``sub``, rlm mode),
    plus ``settings`` given as ``FLEET_*`` names without the prefix (``sandbox_disk_mb="32"``)."""
    env = {
        "FLEET_LM_MODEL": "openai/root",
        "FLEET_LM_BASE_URL": server.base_url,
        "FLEET_LM_API_KEY": "scripted",
        "FLEET_SUB_LM_MODEL": "openai/sub",
        "FLEET_MODE": "rlm",
        # Turns' engines on the threads of the process that runs them: a test of turn processes asks for them.
        "FLEET_WORKER_TURN_PROCESSES": "0",
    }
    env.update({f"FLEET_{name.upper()}": value for name, value in settings.items()})
    return env


def json_events(stdout: str) -> list[dict[str, Any]]:
    """The events ``fleet run --json`` printed."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
