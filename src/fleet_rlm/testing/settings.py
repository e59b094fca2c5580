"""Settings that point Fleet at a scripted model server, for tests and the smoke check."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleet_rlm.config import Settings
from fleet_rlm.models.scripted import ScriptedModelServer

ROOT_MODEL = "root"
SUB_MODEL = "sub"


def scripted_settings(server: ScriptedModelServer, home: Path, **overrides: Any) -> Settings:
    """Settings whose root model is ``root`` and sub-model ``sub`` on ``server``; no file or env is read."""
    values: dict[str, Any] = {
        "home": home,
        "lm_model": f"openai/{ROOT_MODEL}",
        "lm_base_url": server.base_url,
        "lm_api_key": "scripted",
        "sub_lm_model": f"openai/{SUB_MODEL}",
        "lm_num_retries": 0,
        # Scripts are written as RLM steps; a test of triage asks for mode="hybrid" itself.
        "mode": "rlm",
        "turn_timeout": 60.0,
        "execution_timeout": 20.0,
        # Turns' engines on the threads of the process that runs them: a test of turn processes asks for them.
        "worker_turn_processes": 0,
    }
    values.update(overrides)
    # model_validate skips the environment, .env and fleet.toml sources: tests see only these values.
    return Settings.model_validate(values)


def scripted_env(server: ScriptedModelServer, home: Path, database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a ``fleet serve`` (or ``fleet worker``) process whose models are ``server``'s,
    in ``home`` (its own config directory there, so no user's ``fleet.toml`` is read) on ``database_url``;
    ``extra`` adds or overrides variables."""
    config_home = home / "config"
    config_home.mkdir(parents=True, exist_ok=True)
    return {
        "FLEET_HOME": str(home),
        "FLEET_DATABASE_URL": database_url,
        "FLEET_LM_MODEL": f"openai/{ROOT_MODEL}",
        "FLEET_LM_BASE_URL": server.base_url,
        "FLEET_LM_API_KEY": "scripted",
        "FLEET_SUB_LM_MODEL": f"openai/{SUB_MODEL}",
        "FLEET_LM_NUM_RETRIES": "0",
        "FLEET_MODE": "rlm",
        "FLEET_SANDBOX_POOL_SIZE": "0",
        "XDG_CONFIG_HOME": str(config_home),
        **extra,
    }


SettingsFactory = Callable[..., Settings]
"""What the tests' ``make_settings`` fixture is: scripted settings, with a test's overrides as keywords."""
