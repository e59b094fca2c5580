"""Where settings come from: fleet.toml files, ``.env`` and the environment, each accepting short
names besides the sectioned ones; and, for an error, how the user wrote the key at fault."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_settings import BaseSettings, DotEnvSettingsSource, EnvSettingsSource, TomlConfigSettingsSource

from fleet_rlm.config.errors import ConfigError
from fleet_rlm.config.names import SettingPath, env_names, nest_file, nested_env_vars, short_name_of, short_names

ENV_PREFIX = "FLEET_"
ENV_DELIMITER = "__"


def read_toml(model: type[BaseModel], path: Path | Traversable) -> tuple[dict[str, Any], dict[SettingPath, str]]:
    """One fleet.toml as sections, and how each key was written there."""
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    return nest_file(model, data, str(path))


class FleetTomlSource(TomlConfigSettingsSource):
    """The fleet.toml files, later ones winning key by key; flat and old-style keys go to their sections."""

    def __init__(self, settings_cls: type[BaseSettings], files: Sequence[Path]) -> None:
        self._model = settings_cls  # the base class reads the files before it sets settings_cls
        super().__init__(settings_cls, toml_file=list(files), deep_merge=True)

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        return read_toml(self._model, file_path)[0]


class FleetEnvSource(EnvSettingsSource):
    """``FLEET_*`` variables; short names (``FLEET_MAX_ITERATIONS``) count as their nested ones."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return nested_env_vars(super()._load_env_vars(), self.settings_cls, ENV_PREFIX.lower(), ENV_DELIMITER)


class FleetDotEnvSource(DotEnvSettingsSource):
    """``FLEET_*`` lines of ``.env``, short names counting as their nested ones. Other lines are the
    business of other programs; an unknown ``FLEET_*`` name raises ConfigError naming it."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        prefix = ENV_PREFIX.lower()
        ours = {key: value for key, value in super()._load_env_vars().items() if key.startswith(prefix)}
        known = short_names(self.settings_cls)
        for key in ours:
            name = key[len(prefix) :]
            if name not in known and name.split(ENV_DELIMITER)[0] not in self.settings_cls.model_fields:
                raise ConfigError(f"{self.env_file}: unknown key {key.upper()!r}")
        return nested_env_vars(ours, self.settings_cls, prefix, ENV_DELIMITER)


def _in_env(names: Sequence[str], env: Mapping[str, str | None]) -> str | None:
    upper = {key.upper() for key in env}
    return next((name for name in names if name in upper), None)


def written_as(model: type[BaseSettings], loc: SettingPath, overrides: Mapping[str, Any], files: Sequence[Path]) -> str:
    """How the user wrote the setting at ``loc`` (or the nearest one above it) where its value came from,
    searching the sources in precedence order: ``'max_iterations'``, ``'FLEET_LM__MODEL'``,
    ``'FLEET_API_TOKEN' in .env``, ``'lm.model' in /home/me/fleet.toml``."""
    dotenv = DotEnvSettingsSource(model).env_vars
    written_in_files = [read_toml(model, path)[1] for path in reversed(files)]
    for depth in range(len(loc), 0, -1):
        path = loc[:depth]
        short = short_name_of(model, path)
        if short is not None and short in overrides:
            return repr(short)
        if depth == 1 and path[0] in overrides:
            return repr(path[0])
        names = env_names(model, path, ENV_PREFIX, ENV_DELIMITER)
        if found := _in_env(names, os.environ):
            return repr(found)
        if found := _in_env(names, dotenv):
            return f"{found!r} in .env"
        for file, written in zip(reversed(files), written_in_files, strict=True):
            if path in written:
                return f"{written[path]!r} in {file}"
    return repr(".".join(loc))
