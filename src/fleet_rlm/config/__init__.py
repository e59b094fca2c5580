"""Fleet's settings: sections, sources and names (docs/configuration.md)."""

from fleet_rlm.config.errors import ConfigError, ModelNotConfigured
from fleet_rlm.config.sections import (
    BudgetSettings,
    Ceilings,
    LMSettings,
    MemorySettings,
    SandboxSettings,
    ServerSettings,
    SubLMSettings,
    origin_of,
)
from fleet_rlm.config.settings import (
    APP_NAME,
    CONFIG_FILE,
    Settings,
    config_files,
    load_settings,
    require_model,
    setting_field,
    user_config_dir,
)

__all__ = [
    "APP_NAME",
    "CONFIG_FILE",
    "BudgetSettings",
    "Ceilings",
    "ConfigError",
    "LMSettings",
    "MemorySettings",
    "ModelNotConfigured",
    "SandboxSettings",
    "ServerSettings",
    "Settings",
    "SubLMSettings",
    "config_files",
    "load_settings",
    "origin_of",
    "require_model",
    "setting_field",
    "user_config_dir",
]
