"""The names of every setting, and moving values written under one name to where they belong.

A setting lives at a path in the sections (``budget.max_iterations``: ``[budget] max_iterations``
in fleet.toml, ``FLEET_BUDGET__MAX_ITERATIONS`` in the environment). It also keeps its short name
from before the sections (``max_iterations``: ``FLEET_MAX_ITERATIONS``, a top-level key in
fleet.toml, a CLI or session override): a section's prefix plus the field's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from fleet_rlm.config.errors import ConfigError

SettingPath = tuple[str, ...]

SHORT_PREFIX: dict[SettingPath, str] = {
    ("lm",): "lm_",
    ("sub_lm",): "sub_lm_",
    ("sandbox",): "sandbox_",
    ("memory",): "memory_",
    ("judge_lm",): "judge_lm_",
    ("reflection_lm",): "reflection_lm_",
    ("server", "ceilings"): "ceiling_",
    ("worker",): "worker_",
}
"""The short name of a field is this prefix (none for budget, quality and server) plus its name ..."""
SHORT_EXCEPTIONS: dict[SettingPath, str] = {("server", "host"): "server_host", ("server", "port"): "server_port"}
"""... except for these."""


def section_of(annotation: Any) -> type[BaseModel] | None:
    """The section model a field holds, or None for a plain value."""
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


@cache
def short_names(model: type[BaseModel]) -> dict[str, SettingPath]:
    """Each setting's short name and its path."""
    names: dict[str, SettingPath] = {}

    def walk(section: type[BaseModel], parent: SettingPath) -> None:
        for name, info in section.model_fields.items():
            path = (*parent, name)
            inner = section_of(info.annotation)
            if inner is not None:
                walk(inner, path)
                continue
            short = SHORT_EXCEPTIONS.get(path) or SHORT_PREFIX.get(parent, "") + name
            if short in names:
                raise RuntimeError(f"{'.'.join(path)} and {'.'.join(names[short])} share the short name {short!r}")
            names[short] = path

    walk(model, ())
    return names


def short_name_of(model: type[BaseModel], path: SettingPath) -> str | None:
    return next((short for short, at in short_names(model).items() if at == path), None)


def field_at(model: type[BaseModel], path: SettingPath) -> FieldInfo:
    """The field at ``path`` (a KeyError if there is none)."""
    section: type[BaseModel] | None = model
    info: FieldInfo | None = None
    for name in path:
        if section is None:
            raise KeyError(".".join(path))
        info = section.model_fields[name]
        section = section_of(info.annotation)
    if info is None:
        raise KeyError(".".join(path))
    return info


def env_names(model: type[BaseModel], path: SettingPath, prefix: str, delimiter: str) -> list[str]:
    """The environment names of a setting (or section): nested first, then the short one."""
    names = [(prefix + delimiter.join(path)).upper()]
    short = short_name_of(model, path)
    if short is not None and len(path) > 1:
        names.append((prefix + short).upper())
    return names


def put(target: dict[str, Any], path: SettingPath, value: Any) -> None:
    """Set ``path`` in nested dicts, copying (not changing) the dicts and models on the way."""
    node = target
    for name in path[:-1]:
        inner = node.get(name)
        inner = dict(inner) if isinstance(inner, BaseModel | Mapping) else {}
        node[name] = inner
        node = inner
    node[path[-1]] = value


def nest_short_names(model: type[BaseModel], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with each short name moved to its path, over what was there."""
    names = short_names(model)
    nested = {key: value for key, value in values.items() if not (key in names and len(names[key]) > 1)}
    for key, value in values.items():
        if key in names and len(names[key]) > 1:
            put(nested, names[key], value)
    return nested


def nested_env_vars(
    env_vars: Mapping[str, str | None], model: type[BaseModel], prefix: str, delimiter: str
) -> dict[str, str | None]:
    """Environment variables with each short name (``fleet_max_iterations``) renamed to its nested one
    (``fleet_budget__max_iterations``); where both are set, the nested one wins."""
    renamed: dict[str, str | None] = {}
    for key, value in env_vars.items():
        path = short_names(model).get(key[len(prefix) :]) if key.startswith(prefix) else None
        if path is None or len(path) == 1:
            renamed.setdefault(key, value)
            continue
        nested = prefix + delimiter.join(path)
        if nested not in env_vars:
            renamed[nested] = value
    return renamed


def nest_file(
    model: type[BaseModel], data: Mapping[str, Any], where: str
) -> tuple[dict[str, Any], dict[SettingPath, str]]:
    """A parsed fleet.toml as sections, and each path's key as written there. Keys may be written
    under their section (``[budget] max_iterations``), by their short name at the top level
    (``max_iterations``), or under a table named by the short name's first part (``[ceiling]``
    then ``turn_timeout``), as before the sections. An unknown key raises ConfigError naming it."""
    names = short_names(model)
    nested: dict[str, Any] = {}
    written: dict[SettingPath, str] = {}

    def place(path: SettingPath, value: Any, key: str) -> None:
        if path in written:
            raise ConfigError(f"{where}: {written[path]!r} and {key!r} both set {'.'.join(path)}: keep one")
        written[path] = key
        put(nested, path, value)

    def unknown(key: str) -> ConfigError:
        return ConfigError(f"{where}: unknown key {key!r}")

    def walk(section: type[BaseModel], parent: SettingPath, table: Mapping[str, Any]) -> None:
        for key, value in table.items():
            path = (*parent, key)
            info = section.model_fields.get(key)
            if info is None:
                raise unknown(".".join(path))
            inner = section_of(info.annotation)
            if inner is not None and isinstance(value, Mapping):
                walk(inner, path, value)
            else:
                place(path, value, ".".join(path))

    for key, value in data.items():
        info = model.model_fields.get(key)
        if info is not None:
            walk(model, (), {key: value})
        elif key in names:
            place(names[key], value, key)
        elif isinstance(value, Mapping):
            for sub_key, sub_value in value.items():
                if f"{key}_{sub_key}" not in names:
                    raise unknown(f"{key}.{sub_key}")
                place(names[f"{key}_{sub_key}"], sub_value, f"{key}.{sub_key}")
        else:
            raise unknown(key)
    return nested, written
