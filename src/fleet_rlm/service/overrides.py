"""Per-session settings: which settings a session (or a turn) may override, and applying them.

Only settings that shape the work are open to API clients; endpoints, keys, the sandbox backend
and its isolation stay with whoever runs the server (a client must not point the server's API key
at its own URL or switch isolation off).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from fleet_rlm.config import Settings
from fleet_rlm.store import Invalid

SESSION_SETTING_KEYS = (
    "mode",
    "lm_model",
    "lm_temperature",
    "lm_max_tokens",
    "sub_lm_model",
    "sub_lm_temperature",
    "sub_lm_max_tokens",
    "max_iterations",
    "max_model_calls",
    "turn_timeout",
    "execution_timeout",
    "max_output_chars",
    "max_tokens_per_turn",
)

SessionSettings: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "SessionSettings",
    __config__=ConfigDict(extra="forbid"),
    **{key: (Settings.model_fields[key].annotation, Settings.model_fields[key]) for key in SESSION_SETTING_KEYS},
)


def check_session_settings(values: dict[str, Any] | None) -> dict[str, Any]:
    """``values`` validated against the settings' own rules; raises Invalid naming the key."""
    try:
        parsed = SessionSettings.model_validate(values or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "settings"
        if first["type"] == "extra_forbidden":
            raise Invalid(
                f"setting {key!r} cannot be set per session; allowed: {', '.join(SESSION_SETTING_KEYS)}",
                code="invalid_settings",
            ) from exc
        raise Invalid(f"setting {key!r}: {first['msg']}", code="invalid_settings") from exc
    return parsed.model_dump(exclude_unset=True)


def effective_settings(base: Settings, *layers: dict[str, Any] | None) -> Settings:
    """``base`` with each layer of (already checked) overrides applied, later layers winning."""
    update: dict[str, Any] = {}
    for layer in layers:
        update.update({k: v for k, v in (layer or {}).items() if v is not None})
    return base.model_copy(update=update) if update else base
