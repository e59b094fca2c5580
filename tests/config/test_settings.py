"""Loading settings as users write them: sections or short names, fleet.toml, .env, the environment
and CLI overrides, each in its place in the precedence order; a bad key is named as written."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleet_rlm.config import ConfigError, Settings, load_settings
from fleet_rlm.config.names import field_at, short_names

SHORT_NAMES_BEFORE_SECTIONS = {
    "home", "lm_model", "lm_base_url", "lm_api_key", "lm_temperature", "lm_max_tokens", "lm_timeout",
    "lm_num_retries", "lm_stream", "lm_structured_output", "sub_lm_model", "sub_lm_base_url", "sub_lm_api_key", "sub_lm_temperature",
    "sub_lm_max_tokens", "max_iterations", "max_model_calls", "turn_timeout", "execution_timeout",
    "max_output_chars", "max_tokens_per_turn", "loop_guard_warn_after", "loop_guard_stop_after", "max_depth",
    "max_children_per_turn", "max_concurrent_children", "child_max_iterations", "child_timeout",
    "max_cost_per_turn", "model_prices", "sandbox_backend", "sandbox_allow_unisolated", "sandbox_memory_mb",
    "sandbox_max_processes", "sandbox_max_file_size_mb", "sandbox_cpu_seconds", "sandbox_disk_mb",
    "sandbox_max_files", "sandbox_require_limits", "mode", "database_url", "server_host", "server_port",
    "api_token", "upload_limit_mb", "sandbox_pool_size", "max_running_turns", "sse_heartbeat_seconds",
    "allowed_hosts", "cors_origins", "json_body_limit_kb", "import_limit_mb", "import_unpacked_limit_mb",
    "import_file_limit_mb", "import_max_entries", "ceiling_max_iterations", "ceiling_max_model_calls",
    "ceiling_turn_timeout", "ceiling_execution_timeout", "ceiling_max_output_chars",
    "ceiling_max_tokens_per_turn", "ceiling_lm_max_tokens",
}  # fmt: skip
"""Every ``FLEET_<NAME>`` and flat fleet.toml key Fleet read before settings had sections."""


@dataclass
class Place:
    """A project directory (the working directory) and a user config directory, with nothing else set."""

    project: Path
    user_config: Path
    setenv: Callable[[str, str], None]

    def project_toml(self, text: str) -> Path:
        path = self.project / "fleet.toml"
        path.write_text(text)
        return path

    def user_toml(self, text: str) -> Path:
        path = self.user_config / "fleet" / "fleet.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def dotenv(self, text: str) -> None:
        (self.project / ".env").write_text(text)


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Place:
    for key in [k for k in os.environ if k.startswith("FLEET_")]:
        monkeypatch.delenv(key)
    project, user_config = tmp_path / "project", tmp_path / "config"
    project.mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(user_config))
    monkeypatch.chdir(project)
    return Place(project, user_config, monkeypatch.setenv)


def test_every_name_from_before_the_sections_still_names_a_setting() -> None:
    names = short_names(Settings)
    assert set(names) >= SHORT_NAMES_BEFORE_SECTIONS  # settings added since have short names too
    for path in names.values():
        field_at(Settings, path)


def test_sections_in_fleet_toml(place: Place) -> None:
    place.project_toml(
        'mode = "rlm"\n'
        '[lm]\nmodel = "openai/root"\nstream = false\n'
        '[sub_lm]\nmodel = "openai/sub"\n'
        "[budget]\nmax_iterations = 7\nchild_timeout = 30\n"
        '[budget.model_prices]\n"openai/gpt-4.1-mini" = [0.4, 1.6]\n'
        "[sandbox]\nmemory_mb = 512\npool_size = 0\n"
        '[server]\nport = 9000\nallowed_hosts = ["fleet.example.com"]\n'
        "[server.ceilings]\nturn_timeout = 7200\n"
    )
    settings = load_settings()
    assert settings.mode == "rlm"
    assert (settings.lm.model, settings.lm.stream, settings.sub_lm.model) == ("openai/root", False, "openai/sub")
    assert (settings.budget.max_iterations, settings.budget.child_timeout) == (7, 30.0)
    assert settings.budget.model_prices == {"openai/gpt-4.1-mini": (0.4, 1.6)}
    assert (settings.sandbox.memory_mb, settings.sandbox.pool_size) == (512, 0)
    assert (settings.server.port, settings.server.allowed_hosts) == (9000, ["fleet.example.com"])
    assert settings.server.ceilings.turn_timeout == 7200.0


def test_a_fleet_toml_written_before_the_sections_still_works(place: Place) -> None:
    place.project_toml(
        'lm_model = "openai/root"\nmax_iterations = 3\nsandbox_memory_mb = 512\napi_token = "t0ken"\n'
        'server_port = 9000\nmodel_prices = { "openai/root" = [1.0, 2.0] }\n'
        '[sub_lm]\nmodel = "openai/sub"\n'
        "[ceiling]\nturn_timeout = 7200\n"
        "[import]\nlimit_mb = 5\n"
    )
    settings = load_settings()
    assert (settings.lm.model, settings.sub_lm.model) == ("openai/root", "openai/sub")
    assert (settings.budget.max_iterations, settings.sandbox.memory_mb, settings.server.port) == (3, 512, 9000)
    assert settings.server.api_token is not None and settings.server.api_token.get_secret_value() == "t0ken"
    assert settings.budget.model_prices == {"openai/root": (1.0, 2.0)}
    assert (settings.server.ceilings.turn_timeout, settings.server.import_limit_mb) == (7200.0, 5)


def test_the_environments_short_names_still_work(place: Place) -> None:
    for name, value in {
        "FLEET_LM_MODEL": "openai/root",
        "FLEET_SUB_LM_TEMPERATURE": "0.5",
        "FLEET_MAX_ITERATIONS": "9",
        "FLEET_SANDBOX_MEMORY_MB": "256",
        "FLEET_SANDBOX_REQUIRE_LIMITS": "false",
        "FLEET_API_TOKEN": "t0ken",
        "FLEET_DATABASE_URL": "sqlite+aiosqlite:///x.db",
        "FLEET_ALLOWED_HOSTS": "a.example.com, *.b.example.com",
        "FLEET_MODEL_PRICES": '{"openai/root": [1, 2]}',
        "FLEET_CEILING_TURN_TIMEOUT": "60",
        "FLEET_SERVER_PORT": "9001",
    }.items():
        place.setenv(name, value)
    settings = load_settings()
    assert (settings.lm.model, settings.sub_lm.temperature, settings.budget.max_iterations) == ("openai/root", 0.5, 9)
    assert (settings.sandbox.memory_mb, settings.sandbox.require_limits) == (256, False)
    assert settings.server.api_token is not None and settings.server.api_token.get_secret_value() == "t0ken"
    assert settings.database_url == "sqlite+aiosqlite:///x.db"
    assert settings.server.allowed_hosts == ["a.example.com", "*.b.example.com"]
    assert settings.budget.model_prices == {"openai/root": (1.0, 2.0)}
    assert (settings.server.ceilings.turn_timeout, settings.server.port) == (60.0, 9001)


def test_nested_environment_names_and_they_win_over_short_ones(place: Place) -> None:
    place.setenv("FLEET_LM__MODEL", "openai/nested")
    place.setenv("FLEET_BUDGET__MAX_ITERATIONS", "11")
    place.setenv("FLEET_MAX_ITERATIONS", "5")
    place.setenv("FLEET_SERVER__CEILINGS__TURN_TIMEOUT", "70")
    place.setenv("FLEET_SERVER__CORS_ORIGINS", "https://UI.example.com:443")
    settings = load_settings()
    assert (settings.lm.model, settings.budget.max_iterations) == ("openai/nested", 11)
    assert settings.server.ceilings.turn_timeout == 70.0
    assert settings.server.cors_origins == ["https://ui.example.com"]


def test_precedence_cli_over_env_over_dotenv_over_project_over_user_toml(place: Place) -> None:
    place.user_toml(
        "[budget]\nmax_iterations = 1\nmax_model_calls = 1\nturn_timeout = 1\nexecution_timeout = 1\n"
        "max_output_chars = 1\n"
        '[lm]\nbase_url = "http://user/v1"\nmodel = "user"\n'
    )
    place.project_toml(
        "max_iterations = 2\nmax_model_calls = 2\nturn_timeout = 2\n[budget]\nexecution_timeout = 2\n"
        '[lm]\nmodel = "project"\n'
    )
    place.dotenv("FLEET_MAX_ITERATIONS=3\nFLEET_BUDGET__MAX_MODEL_CALLS=3\nFLEET_TURN_TIMEOUT=3\nUNRELATED=1\n")
    place.setenv("FLEET_MAX_ITERATIONS", "4")
    place.setenv("FLEET_MAX_MODEL_CALLS", "4")
    settings = load_settings(max_iterations=5, lm_model=None)
    budget = settings.budget
    assert (budget.max_iterations, budget.max_model_calls, budget.turn_timeout) == (5, 4, 3.0)
    assert (budget.execution_timeout, budget.max_output_chars) == (2.0, 1)
    # Files merge key by key: the project's [lm] model leaves the user's [lm] base_url in place.
    assert (settings.lm.model, settings.lm.base_url) == ("project", "http://user/v1")


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("no_such_setting = 1\n", "'no_such_setting'"),
        ('[lm]\nmodle = "x"\n', "'lm.modle'"),
        ("[server.ceilings]\nturn_timeot = 1\n", "'server.ceilings.turn_timeot'"),
        ("[ceiling]\nturn_timeot = 1\n", "'ceiling.turn_timeot'"),
    ],
)
def test_an_unknown_key_in_fleet_toml_is_named_as_written(place: Place, toml: str, key: str) -> None:
    path = place.project_toml(toml)
    with pytest.raises(ConfigError, match=f"^{re.escape(str(path))}: unknown key {key}$"):
        load_settings()


def test_unknown_environment_names_are_named_as_written(place: Place) -> None:
    place.setenv("FLEET_LM__MODLE", "x")
    with pytest.raises(ConfigError, match=r"^unknown configuration key 'FLEET_LM__MODLE'$"):
        load_settings()


def test_an_unknown_fleet_name_in_dotenv_is_named(place: Place) -> None:
    place.dotenv("FLEET_NO_SUCH_SETTING=1\n")
    with pytest.raises(ConfigError, match=r"^\.env: unknown key 'FLEET_NO_SUCH_SETTING'$"):
        load_settings()


def test_a_bad_value_is_named_where_it_was_written(place: Place) -> None:
    path = place.project_toml("max_iterations = 0\n[sandbox]\nmemory_mb = 0\n")
    with pytest.raises(
        ConfigError,
        match=f"^configuration key 'max_iterations' in {re.escape(str(path))}: Input should be greater than 0$",
    ):
        load_settings(sandbox_memory_mb=1)
    place.setenv("FLEET_MAX_ITERATIONS", "many")
    with pytest.raises(
        ConfigError, match=r"^configuration key 'FLEET_MAX_ITERATIONS': Input should be a valid integer"
    ):
        load_settings()
    with pytest.raises(ConfigError, match=r"^configuration key 'max_iterations': Input should be greater than 0$"):
        load_settings(max_iterations=-1)


def test_one_setting_written_twice_in_one_file_is_refused(place: Place) -> None:
    path = place.project_toml('lm_model = "a"\n[lm]\nmodel = "b"\n')
    with pytest.raises(
        ConfigError, match=f"^{re.escape(str(path))}: 'lm_model' and 'lm.model' both set lm.model: keep one$"
    ):
        load_settings()


def test_with_values_takes_short_names_and_validates() -> None:
    settings = Settings.model_validate({"max_iterations": 4, "lm_model": "openai/root"})
    changed = settings.with_values({"turn_timeout": 30.0, "sandbox_require_limits": True, "mode": "direct"})
    assert (changed.budget.max_iterations, changed.budget.turn_timeout) == (4, 30.0)
    assert (changed.sandbox.require_limits, changed.mode, changed.lm.model) == (True, "direct", "openai/root")
    assert settings.budget.turn_timeout == 900.0
    with pytest.raises(ValueError, match="greater than 0"):
        settings.with_values({"turn_timeout": 0})


def test_the_sub_model_falls_back_to_the_roots_fields() -> None:
    settings = Settings.model_validate(
        {"lm_model": "openai/root", "lm_base_url": "http://root/v1", "lm_temperature": 0.3, "sub_lm_model": "s"}
    )
    sub = settings.sub_lm.over(settings.lm)
    assert (sub.model, sub.base_url, sub.temperature, sub.timeout) == ("s", "http://root/v1", 0.3, 120.0)
    assert settings.sub_lm.over(settings.lm.model_copy(update={"temperature": None})).temperature is None


def test_docs_list_every_setting_with_its_environment_names() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    rows = {line.split(" | ")[0].strip("| `"): line for line in docs.splitlines() if line.startswith("| `")}
    for short, path in short_names(Settings).items():
        row = rows[".".join(path)]
        assert f"`FLEET_{short.upper()}`" in row
        if len(path) > 1:
            assert f"`FLEET_{'__'.join(path).upper()}`" in row
