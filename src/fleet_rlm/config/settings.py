"""Fleet's settings, all in one place (docs/configuration.md lists every key).

Sources, in rising precedence: ``fleet.toml`` in the user config directory, ``fleet.toml`` in the
project directory, ``.env``, the environment (``FLEET_*``), then explicit overrides (CLI flags).
Settings are grouped in sections (``[lm]``, ``[sub_lm]``, ``[budget]``, ``[sandbox]``, ``[memory]``,
``[server]``); every setting also keeps its short name (``max_iterations``, ``FLEET_MAX_ITERATIONS``).
An unknown key fails fast and names the key as it was written.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import BaseModel, Field, SecretStr, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from fleet_rlm.config.errors import ConfigError, ModelNotConfigured
from fleet_rlm.config.names import SettingPath, field_at, nest_short_names, short_names
from fleet_rlm.config.sections import (
    BudgetSettings,
    JudgeLMSettings,
    LMSettings,
    MemorySettings,
    QualitySettings,
    ReflectionLMSettings,
    SandboxSettings,
    ServerSettings,
    SubLMSettings,
    TracingSettings,
    WorkerSettings,
)
from fleet_rlm.config.sources import (
    ENV_DELIMITER,
    ENV_PREFIX,
    FleetDotEnvSource,
    FleetEnvSource,
    FleetTomlSource,
    written_as,
)
from fleet_rlm.protocol.routes import Mode

APP_NAME = "fleet"
CONFIG_FILE = "fleet.toml"


def user_config_dir() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME))


def config_files(project_dir: Path | None = None) -> list[Path]:
    """The TOML files read, lowest precedence first."""
    project = (project_dir or Path.cwd()) / CONFIG_FILE
    return [p for p in (user_config_dir() / CONFIG_FILE, project) if p.is_file()]


class Settings(BaseSettings):
    """Every setting Fleet reads, by section. Each layer is handed the section it needs."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_DELIMITER,
        env_file=".env",
        extra="forbid",
        validate_default=True,
    )

    home: Path | None = Field(
        default=None, description="Fleet's data directory; the platform's user data dir if unset."
    )
    database_url: str | None = Field(default=None, description="SQLAlchemy async URL; SQLite under home if unset.")
    mode: Mode = Field(default="hybrid", description="Route choice: hybrid (triage per turn), rlm, flex or direct.")
    lm: LMSettings = Field(default_factory=lambda: LMSettings())
    sub_lm: SubLMSettings = Field(default_factory=lambda: SubLMSettings())
    budget: BudgetSettings = Field(default_factory=lambda: BudgetSettings())
    sandbox: SandboxSettings = Field(default_factory=lambda: SandboxSettings())
    memory: MemorySettings = Field(default_factory=lambda: MemorySettings())
    server: ServerSettings = Field(default_factory=lambda: ServerSettings())
    worker: WorkerSettings = Field(default_factory=lambda: WorkerSettings())
    quality: QualitySettings = Field(default_factory=lambda: QualitySettings())
    judge_lm: JudgeLMSettings = Field(default_factory=lambda: JudgeLMSettings())
    reflection_lm: ReflectionLMSettings = Field(default_factory=lambda: ReflectionLMSettings())
    tracing: TracingSettings = Field(default_factory=lambda: TracingSettings())

    @model_validator(mode="before")
    @classmethod
    def _short_names(cls, values: Any) -> Any:
        """Short names (``max_iterations``, as CLI flags and session settings give them) go to their
        section, over what the section holds there."""
        return nest_short_names(cls, values) if isinstance(values, Mapping) else values

    @model_validator(mode="after")
    def _home_absolute(self) -> Settings:
        if self.home is not None:
            self.home = self.home.expanduser().resolve()
        return self

    @property
    def data_dir(self) -> Path:
        return self.home or Path(platformdirs.user_data_dir(APP_NAME))

    @property
    def workspaces_dir(self) -> Path:
        return self.data_dir / "workspaces"

    @property
    def runs_dir(self) -> Path:
        """Where ``fleet run`` keeps the volume its sandboxes work on while a turn runs."""
        return self.data_dir / "runs"

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    def secret_values(self) -> list[str]:
        """Every secret set (model API keys, the API token), in plain text: for redaction."""
        return [secret.get_secret_value() for secret in _secrets(self)]

    def with_values(self, values: Mapping[str, Any]) -> Settings:
        """A validated copy with ``values`` (by short name, e.g. ``turn_timeout``) applied."""
        if not values:
            return self
        return type(self).model_validate({**dict(self), **values})

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            FleetEnvSource(settings_cls),
            FleetDotEnvSource(settings_cls),
            FleetTomlSource(settings_cls, config_files()),
        )


def _secrets(section: BaseModel) -> Iterator[SecretStr]:
    for _, value in section:
        if isinstance(value, SecretStr):
            yield value
        elif isinstance(value, BaseModel):
            yield from _secrets(value)


def setting_field(short_name: str) -> FieldInfo:
    """The field of a setting given by its short name (a KeyError if there is none)."""
    return field_at(Settings, short_names(Settings)[short_name])


def load_settings(**overrides: Any) -> Settings:
    """Load settings from every source; ``overrides`` (CLI flags, by short name) win. Raises ConfigError."""
    clean = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**clean)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc: SettingPath = tuple(str(part) for part in first["loc"])
        key = written_as(Settings, loc, clean, config_files()) if loc else "'settings'"
        if first["type"] == "extra_forbidden":
            raise ConfigError(f"unknown configuration key {key}") from exc
        raise ConfigError(f"configuration key {key}: {first['msg']}") from exc


def require_model(lm: LMSettings) -> str:
    if not lm.model:
        raise ModelNotConfigured(
            "no model configured: set FLEET_LM_MODEL (e.g. openai/gpt-4.1-mini), plus FLEET_LM_BASE_URL and "
            "FLEET_LM_API_KEY for an OpenAI-compatible endpoint, or put them in fleet.toml under [lm]"
        )
    return lm.model
