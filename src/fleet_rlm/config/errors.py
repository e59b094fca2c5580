"""Why a configuration cannot be used."""

from __future__ import annotations


class ConfigError(ValueError):
    """The configuration cannot be used; the message says which key and why."""


class ModelNotConfigured(ConfigError):
    """No root model is configured."""
