"""A real multi-process topology on this machine: API replicas (``fleet serve --no-workers``) and
``fleet worker`` processes sharing one PostgreSQL database, the scripted model and one data directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.testing.cli import scripted_env
from tests.store.databases import PostgresDatabases, postgres_databases

from .processes import Topology

__all__ = ["postgres_databases"]

pytestmark = pytest.mark.postgres


@pytest.fixture
def postgres_url(postgres_databases: PostgresDatabases) -> Iterator[str]:
    url = postgres_databases.new_url()
    yield url
    postgres_databases.drop(url)


@pytest.fixture
def topology(model_server: ScriptedModelServer, home: Path, postgres_url: str, tmp_path: Path) -> Iterator[Topology]:
    config_home = tmp_path / "config"
    config_home.mkdir()
    env = {
        "FLEET_HOME": str(home),
        "FLEET_DATABASE_URL": postgres_url,
        "XDG_CONFIG_HOME": str(config_home),
        **scripted_env(
            model_server,
            lm_num_retries="0",
            sandbox_pool_size="1",
            worker_in_server="false",
            worker_turn_processes="1",
        ),
    }
    running = Topology(env, tmp_path / "logs", postgres_url)
    yield running
    running.stop()
