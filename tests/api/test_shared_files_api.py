"""Session files shared through the database, over HTTP: two servers with data directories of their own
on one PostgreSQL database (``worker.file_store = "database"``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from fleet_rlm.config import Settings
from fleet_rlm.models.scripted import ScriptedModelServer
from fleet_rlm.testing.settings import scripted_settings
from tests.store.databases import PostgresDatabases

from .server import server_in_thread

pytestmark = pytest.mark.postgres

CSV = b"region,revenue\nnorth,7811\nsouth,6813\n"


async def _alter(url: str) -> None:
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        await connection.execute("UPDATE blob_chunks SET data = $1", b"region,revenue\nnorth,99999\n")
    finally:
        await connection.close()


def test_a_file_uploaded_to_one_server_downloads_from_another_and_altered_bytes_are_refused(
    model_server: ScriptedModelServer, tmp_path: Path, postgres_databases: PostgresDatabases
) -> None:
    url = postgres_databases.new_url()
    try:

        def machine(name: str) -> Settings:
            return scripted_settings(
                model_server, tmp_path / name, database_url=url, worker_file_store="database", sandbox_pool_size=0
            )

        with server_in_thread(machine("a")) as api, api.http() as http:
            http.post("/sessions", json={"name": "s"})
            assert http.post("/sessions/s/files", files={"file": ("sales.csv", CSV, "text/csv")}).status_code == 201
        with server_in_thread(machine("b")) as api, api.http() as http:
            listed = http.get("/sessions/s/files").json()["items"]
            assert [(f["path"], f["kind"]) for f in listed] == [("files/sales.csv", "csv")]
            assert http.get("/sessions/s/files/files/sales.csv").content == CSV

        asyncio.run(_alter(url))
        with server_in_thread(machine("c")) as api, api.http() as http:
            refused = http.get("/sessions/s/files/files/sales.csv")
            assert refused.status_code == 500 and refused.json()["code"] == "file_damaged"
            assert "do not match" in refused.json()["message"]
            assert b"99999" not in refused.content
            assert http.get("/sessions/s/export").status_code == 500
    finally:
        postgres_databases.drop(url)
