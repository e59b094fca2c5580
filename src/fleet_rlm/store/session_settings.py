"""Per-session settings: which settings a session (or a turn) may override, and applying them.

Only settings that shape the work are open to API clients; endpoints, keys, the sandbox backend
and its isolation stay with whoever runs the server (a client must not point the server's API key
at its own URL or switch isolation off). Each budget a client may raise has a ceiling the server's
operator sets (``[server.ceilings]``); a value past it is refused, naming the field and the maximum.
Keys are the settings' short names (``turn_timeout``, ``lm_model``): the API's JSON shape.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from fleet_rlm.config import Ceilings, Settings, setting_field
from fleet_rlm.store.errors import Invalid

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
    "capture_replays",
)

CEILING_OF = {
    "max_iterations": "max_iterations",
    "max_model_calls": "max_model_calls",
    "turn_timeout": "turn_timeout",
    "execution_timeout": "execution_timeout",
    "max_output_chars": "max_output_chars",
    "max_tokens_per_turn": "max_tokens_per_turn",
    "lm_max_tokens": "lm_max_tokens",
    "sub_lm_max_tokens": "lm_max_tokens",
}
"""Each numeric budget and the field of ``Ceilings`` holding its maximum."""
FIXED_RANGES = {"lm_temperature": (0.0, 2.0), "sub_lm_temperature": (0.0, 2.0)}
MAX_MODEL_NAME = 200

SessionSettings: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "SessionSettings",
    __config__=ConfigDict(extra="forbid"),
    **{key: (setting_field(key).annotation, setting_field(key)) for key in SESSION_SETTING_KEYS},
)


def _refuse(message: str) -> Invalid:
    return Invalid(message, code="invalid_settings")


def _check_bounds(values: dict[str, Any], ceilings: Ceilings) -> None:
    for key, value in values.items():
        if value is None:
            continue
        if key in CEILING_OF:
            ceiling = getattr(ceilings, CEILING_OF[key])
            if value > ceiling:
                env = f"FLEET_CEILING_{CEILING_OF[key].upper()}"
                raise _refuse(f"setting {key!r}: {value} is above this server's maximum of {ceiling} ({env})")
        elif key in FIXED_RANGES:
            low, high = FIXED_RANGES[key]
            if not low <= value <= high:
                raise _refuse(f"setting {key!r}: {value} is outside {low}..{high}")
        elif key in ("lm_model", "sub_lm_model") and len(value) > MAX_MODEL_NAME:
            raise _refuse(f"setting {key!r}: longer than the maximum of {MAX_MODEL_NAME} characters")


def check_session_settings(values: dict[str, Any] | None, ceilings: Ceilings) -> dict[str, Any]:
    """``values`` validated against the settings' own rules and the server's ``ceilings``; raises
    Invalid naming the key."""
    try:
        parsed = SessionSettings.model_validate(values or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "settings"
        if first["type"] == "extra_forbidden":
            raise _refuse(
                f"setting {key!r} cannot be set per session; allowed: {', '.join(SESSION_SETTING_KEYS)}"
            ) from exc
        raise _refuse(f"setting {key!r}: {first['msg']}") from exc
    checked = parsed.model_dump(exclude_unset=True)
    _check_bounds(checked, ceilings)
    return checked


def effective_settings(base: Settings, *layers: dict[str, Any] | None) -> Settings:
    """``base`` with each layer of (already checked) overrides applied, later layers winning."""
    update: dict[str, Any] = {}
    for layer in layers:
        update.update({k: v for k, v in (layer or {}).items() if v is not None})
    return base.with_values(update)
