"""Fleet's settings, all in one place.

Sources, in rising precedence: ``fleet.toml`` in the user config directory, ``fleet.toml`` in the
project directory, ``.env``, the environment (``FLEET_*``), then explicit overrides (CLI flags).
In TOML a key may be written flat (``lm_model = "..."``) or grouped in a table whose name is the
prefix (``[lm]`` then ``model = "..."``). An unknown key fails fast and names the key.
"""

from __future__ import annotations

import ipaddress
import json
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import platformdirs
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from fleet_rlm.protocol.routes import Mode

APP_NAME = "fleet"
CONFIG_FILE = "fleet.toml"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def origin_of(scheme: str, host: str, port: int | None) -> str:
    """A web origin in the form browsers send (lower case, no default port)."""
    scheme, host = scheme.lower(), host.lower()
    bracketed = f"[{host}]" if ":" in host else host
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{bracketed}" if port in (None, default) else f"{scheme}://{bracketed}:{port}"


class ConfigError(ValueError):
    """The configuration cannot be used; the message says which key and why."""


def user_config_dir() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME))


def config_files(project_dir: Path | None = None) -> list[Path]:
    """The TOML files read, lowest precedence first."""
    project = (project_dir or Path.cwd()) / CONFIG_FILE
    return [p for p in (user_config_dir() / CONFIG_FILE, project) if p.is_file()]


class Settings(BaseSettings):
    """Every setting Fleet reads. Environment names are ``FLEET_`` + the upper-cased field name."""

    model_config = SettingsConfigDict(env_prefix="FLEET_", env_file=".env", extra="forbid", validate_default=True)

    home: Path | None = Field(None, description="Fleet's data directory; the platform's user data dir if unset.")

    # Root model (writes the code).
    lm_model: str | None = Field(None, description="Root model, e.g. openai/gpt-4.1-mini.")
    lm_base_url: str | None = None
    lm_api_key: SecretStr | None = None
    lm_temperature: float | None = None
    lm_max_tokens: int | None = Field(None, gt=0)
    lm_timeout: float = Field(120.0, gt=0, description="Seconds to wait for one model response.")
    lm_num_retries: int = Field(2, ge=0)
    lm_stream: bool = Field(True, description="Stream completions so reasoning and code arrive live.")

    # Sub-model (answers llm_query); each field defaults to the root's.
    sub_lm_model: str | None = None
    sub_lm_base_url: str | None = None
    sub_lm_api_key: SecretStr | None = None
    sub_lm_temperature: float | None = None
    sub_lm_max_tokens: int | None = Field(None, gt=0)

    # Budgets per turn.
    max_iterations: int = Field(20, gt=0, description="RLM iterations per turn.")
    max_model_calls: int = Field(60, gt=0, description="Root + sub-model calls per turn, one counter.")
    turn_timeout: float = Field(900.0, gt=0, description="Wall-clock seconds a turn may take.")
    execution_timeout: float = Field(120.0, gt=0, description="Wall-clock seconds one code execution may take.")
    max_output_chars: int = Field(20_000, gt=0, description="Output characters kept per execution.")
    max_tokens_per_turn: int | None = Field(None, gt=0, description="Optional ceiling on model tokens per turn.")
    loop_guard_warn_after: int = Field(
        2, ge=1, description="Identical failures of the same code in a row before the model is told to change course."
    )
    loop_guard_stop_after: int = Field(
        4, ge=1, description="Identical failures of the same code in a row that end the turn as incomplete."
    )

    # Child agents (spawn_agent / spawn_agents in sandbox code).
    max_depth: int = Field(2, ge=0, description="How deep child agents may nest; 0 disables delegation.")
    max_children_per_turn: int = Field(16, ge=0, description="Child agents one turn may start, all levels.")
    max_concurrent_children: int = Field(4, gt=0, description="Child agents running at once per turn.")
    child_max_iterations: int = Field(10, gt=0, description="Iteration budget of each child agent.")
    child_timeout: float = Field(300.0, gt=0, description="Seconds a child may run; never beyond its parent.")
    max_cost_per_turn: float | None = Field(None, gt=0, description="Ceiling on model cost per turn (needs prices).")
    model_prices: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description="Per model (as in lm_model): (input, output) price per million tokens, for max_cost_per_turn.",
    )

    # Sandbox.
    sandbox_backend: Literal["local"] = "local"
    sandbox_allow_unisolated: bool = Field(
        False, description="Run the worker without bubblewrap when it is missing (no isolation!)."
    )
    sandbox_memory_mb: int = Field(2048, gt=0)
    sandbox_max_processes: int = Field(64, gt=0)
    sandbox_max_file_size_mb: int = Field(1024, gt=0)
    sandbox_cpu_seconds: int = Field(1800, gt=0)
    sandbox_disk_mb: int = Field(
        10_240, gt=0, description="MiB a sandbox's workspace volume holds, inputs included (a sparse image)."
    )
    sandbox_max_files: int = Field(100_000, ge=1000, description="Files and directories a workspace volume holds.")
    sandbox_require_limits: bool | None = Field(
        None,
        description="Refuse sandboxes whose whole-sandbox limits (memory and process cgroups, sized /tmp, "
        "CPU time, seccomp) cannot be enforced here; unset: on for `fleet serve`, off for `fleet run`.",
    )

    # Routing.
    mode: Mode = Field("hybrid", description="Route choice: hybrid (triage per turn), rlm, flex or direct.")

    # Server.
    database_url: str | None = Field(None, description="SQLAlchemy async URL; SQLite under home if unset.")
    server_host: str = "127.0.0.1"
    server_port: int = Field(8765, gt=0, lt=65536)
    api_token: SecretStr | None = None
    upload_limit_mb: int = Field(100, gt=0)
    sandbox_pool_size: int = Field(2, ge=0)
    max_running_turns: int = Field(
        32, ge=0, description="Turns one server runs at once (0: no limit); more wait queued, in order."
    )
    sse_heartbeat_seconds: float = Field(
        15.0, gt=0, le=15.0, description="Seconds between SSE heartbeats while a turn is quiet (at most 15)."
    )

    # What the API accepts (docs/security.md, section API).
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host names the API answers besides loopback ones ('*.example.com': its subdomains; '*': any).",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Browser origins (scheme://host[:port]) allowed to call the API cross-site."
    )
    json_body_limit_kb: int = Field(1024, gt=0, description="Largest JSON request body, in KiB.")
    import_limit_mb: int = Field(1024, gt=0, description="Largest session archive to import (as sent), in MiB.")
    import_unpacked_limit_mb: int = Field(4096, gt=0, description="Most bytes an archive may unpack to, in MiB.")
    import_file_limit_mb: int = Field(1024, gt=0, description="Largest single file inside an archive, in MiB.")
    import_max_entries: int = Field(20_000, gt=0, description="Most entries an archive may hold.")

    # Ceilings on what a session's settings or a turn's options may ask for.
    ceiling_max_iterations: int = Field(100, gt=0)
    ceiling_max_model_calls: int = Field(500, gt=0)
    ceiling_turn_timeout: float = Field(3600.0, gt=0)
    ceiling_execution_timeout: float = Field(600.0, gt=0)
    ceiling_max_output_chars: int = Field(200_000, gt=0)
    ceiling_max_tokens_per_turn: int = Field(10_000_000, gt=0)
    ceiling_lm_max_tokens: int = Field(200_000, gt=0, description="For lm_max_tokens and sub_lm_max_tokens.")

    @field_validator("api_token")
    @classmethod
    def _empty_token_is_none(cls, value: SecretStr | None) -> SecretStr | None:
        """``FLEET_API_TOKEN=""`` means no token, never a token everyone knows."""
        return value if value is not None and value.get_secret_value().strip() else None

    @field_validator("allowed_hosts", "cors_origins", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        """A list, a JSON list, or names separated by commas (handy in the environment)."""
        if isinstance(value, str):
            text = value.strip()
            return (
                json.loads(text) if text.startswith("[") else [part.strip() for part in text.split(",") if part.strip()]
            )
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _host_patterns(cls, hosts: list[str]) -> list[str]:
        normal = []
        for host in hosts:
            name = host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")
            bare = name.removeprefix("*.")
            if name != "*" and not ((bare and _is_ip(bare)) or (bare and not any(c in bare for c in "*/:@?# "))):
                raise ValueError(f"{host!r} is not a host name: give names like fleet.example.com or *.example.com")
            normal.append(name)
        return normal

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        normal = []
        for origin in origins:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/") or parts.query:
                raise ValueError(f"{origin!r} is not an origin: give scheme://host[:port], e.g. https://ui.example.com")
            normal.append(origin_of(parts.scheme, parts.hostname, parts.port))
        return normal

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

    @property
    def sub_model(self) -> str | None:
        return self.sub_lm_model or self.lm_model

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, dotenv_settings, _TomlSource(settings_cls))


class _TomlSource(PydanticBaseSettingsSource):
    """Reads the fleet.toml files, flattening ``[table] key`` into ``table_key``."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for path in config_files():
            merged.update(_read_toml(path, set(self.settings_cls.model_fields)))
        return merged


def _read_toml(path: Path, known: set[str]) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            for sub_key, sub_value in value.items():
                flat[f"{key}_{sub_key}"] = sub_value
        else:
            flat[key] = value
    unknown = sorted(set(flat) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r}" + (f" (and {unknown[1:]})" if unknown[1:] else ""))
    return flat


def load_settings(**overrides: Any) -> Settings:
    """Load settings from every source; ``overrides`` (CLI flags) win. Raises ConfigError."""
    clean = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**clean)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "settings"
        if first["type"] == "extra_forbidden":
            raise ConfigError(f"unknown configuration key {key!r}") from exc
        raise ConfigError(f"configuration key {key!r}: {first['msg']}") from exc


class ModelNotConfigured(ConfigError):
    """No root model is configured."""


def require_model(settings: Settings) -> str:
    if not settings.lm_model:
        raise ModelNotConfigured(
            "no model configured: set FLEET_LM_MODEL (e.g. openai/gpt-4.1-mini), plus FLEET_LM_BASE_URL and "
            "FLEET_LM_API_KEY for an OpenAI-compatible endpoint, or put them in fleet.toml under [lm]"
        )
    return settings.lm_model
