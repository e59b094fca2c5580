"""Session files across machines (``worker.file_store = "database"``): an API replica and a worker
with data directories of their own share one PostgreSQL database, and nothing else. Each service here
stands for a process on its own machine."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from fleet_rlm.config import ConfigError
from fleet_rlm.models.scripted import ScriptedModelServer, rlm_step
from fleet_rlm.service.service import FleetService
from fleet_rlm.service.turns.service import TurnSubmission
from fleet_rlm.store import Database
from fleet_rlm.store.shared_blobs import BlobMismatch
from fleet_rlm.store.tables import BlobChunkRow
from fleet_rlm.testing.settings import scripted_settings
from tests.service.scaleout.test_queue import Processes, on_a_new_database
from tests.store.databases import PostgresDatabases

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

SALES = b"region,revenue\nnorth,7811\nsouth,6813\n"
TOTAL = "import csv\nrows = list(csv.DictReader(open('files/sales.csv')))\n"


class Machines(Processes):
    """Every service started gets a data directory of its own: a machine of its own."""

    def __init__(self, model_server: ScriptedModelServer, root: Path, url: str) -> None:
        super().__init__(model_server, root / "unused", url)
        self.model_server, self.root, self.url = model_server, root, url

    def _machine(self, name: str, *, runs_turns: bool | None = None) -> FleetService:
        settings = scripted_settings(
            self.model_server,
            self.root / name,
            database_url=self.url,
            sandbox_pool_size=0,
            worker_in_server=False,
            worker_lease_seconds=3,
            worker_file_store="database",
        )
        return FleetService(settings, database=Database(self.url), runs_turns=runs_turns)

    async def api_on(self, name: str) -> FleetService:
        return await self._start(self._machine(name))

    async def worker_on(self, name: str) -> FleetService:
        return await self._start(self._machine(name, runs_turns=True))


@pytest.fixture
async def machines(
    model_server: ScriptedModelServer, tmp_path: Path, postgres_databases: PostgresDatabases
) -> AsyncIterator[Machines]:
    async with on_a_new_database(postgres_databases, lambda url: Machines(model_server, tmp_path, url)) as running:
        yield running


def blobs_on(service: FleetService, session_id: str) -> set[str]:
    folder = service.parts.blobs.session_dir(session_id) / "blobs"
    return {entry.name for entry in folder.iterdir()} if folder.is_dir() else set()


async def test_a_file_uploaded_on_one_machine_is_read_by_a_turn_on_another_and_its_artifact_comes_back(
    machines: Machines, model_server: ScriptedModelServer
) -> None:
    api = await machines.api_on("api")
    worker = await machines.worker_on("worker")
    session = await api.sessions.create(name="s")
    uploaded, _ = await api.files.upload("s", "sales.csv", io.BytesIO(SALES))
    assert blobs_on(worker, session.id) == set()

    code = (
        TOTAL + "total = sum(int(r['revenue']) for r in rows)\n"
        "open('artifacts/total.txt', 'w').write(str(total))\nSUBMIT(answer=str(total))"
    )
    model_server.script("root", rlm_step("Add the revenue.", code))
    turn, _ = await api.turns.submit("s", TurnSubmission(message="total revenue"))
    done = await api.turns.wait(turn.id)
    assert (done.status, done.answer, done.runner) == ("completed", "14624", worker.parts.runner)
    assert uploaded.sha256 in blobs_on(worker, session.id)

    record, path = await api.files.download("s", "artifacts/total.txt")
    assert path.read_bytes() == b"14624"
    assert record.sha256 == hashlib.sha256(b"14624").hexdigest()
    listed = {record.path: kind for record, kind in await api.files.in_session("s")}
    assert set(listed) == {"files/sales.csv", "artifacts/total.txt"}

    elsewhere = await machines.api_on("third")
    archive = io.BytesIO()
    await elsewhere.archives.export("s", archive)
    archive.seek(0)
    with tarfile.open(fileobj=archive) as tar:
        members = {m.name for m in tar.getmembers()}
    assert {f"blobs/{uploaded.sha256}", f"blobs/{record.sha256}"} <= members


async def test_listing_files_on_another_machine_tells_their_kinds_without_fetching_them(machines: Machines) -> None:
    api = await machines.api_on("api")
    session = await api.sessions.create(name="s")
    big_text = b"".join(b"line %d of the notes\n" % i for i in range(2000))  # more than one sample each end
    await api.files.upload("s", "sales.csv", io.BytesIO(SALES))
    await api.files.upload("s", "notes.txt", io.BytesIO(big_text))
    await api.files.upload("s", "photo.png", io.BytesIO(b"\x89PNG\r\n\x1a\n" + bytes(64)))
    here = {record.path: kind for record, kind in await api.files.in_session("s")}

    elsewhere = await machines.api_on("elsewhere")
    listed = {record.path: kind for record, kind in await elsewhere.files.in_session("s")}

    assert listed == here
    assert listed == {"files/sales.csv": "csv", "files/notes.txt": "text", "files/photo.png": "image"}
    assert blobs_on(elsewhere, session.id) == set()  # nothing fetched to list them


async def test_an_archive_imported_on_one_machine_is_usable_on_another(machines: Machines) -> None:
    api = await machines.api_on("api")
    await api.sessions.create(name="s")
    await api.files.upload("s", "sales.csv", io.BytesIO(SALES))
    archive = io.BytesIO()
    await api.archives.export("s", archive)
    archive.seek(0)
    await api.archives.restore(archive, name="copy")

    other = await machines.api_on("other")
    _, path = await other.files.download("copy", "files/sales.csv")
    assert path.read_bytes() == SALES
    assert path.is_relative_to(other.settings.data_dir)


async def test_deleting_a_session_drops_its_shared_bytes(machines: Machines) -> None:
    api = await machines.api_on("api")
    await api.sessions.create(name="s")
    await api.files.upload("s", "sales.csv", io.BytesIO(SALES))
    await api.sessions.delete("s")
    async with api.parts.database.read() as session:
        assert await session.scalar(select(func.count()).select_from(BlobChunkRow)) == 0


async def test_shared_bytes_altered_in_the_database_are_refused_and_never_served(machines: Machines) -> None:
    api = await machines.api_on("api")
    session = await api.sessions.create(name="s")
    uploaded, _ = await api.files.upload("s", "sales.csv", io.BytesIO(SALES))
    async with api.parts.database.write() as db:
        await db.execute(update(BlobChunkRow).values(data=b"region,revenue\nnorth,99999\n"))

    other = await machines.api_on("other")
    with pytest.raises(BlobMismatch):
        await other.files.download("s", "files/sales.csv")
    assert blobs_on(other, session.id) == set()
    staging = other.parts.blobs.session_dir(session.id) / "staging"
    assert not staging.is_dir() or list(staging.iterdir()) == []
    _, original = await api.files.download("s", "files/sales.csv")
    assert original.read_bytes() == SALES and uploaded.size == len(SALES)


async def test_a_kernel_is_never_reused_or_restored_stale_after_a_turn_on_another_machine(
    machines: Machines, model_server: ScriptedModelServer
) -> None:
    """x is 1 in machine A's kernel snapshot, then 5 after a turn on machine B. A's next worker must
    not bring back x = 1; both fresh kernels say why the earlier state is gone."""
    api = await machines.api_on("api")
    await api.sessions.create(name="s")
    report = "SUBMIT(answer=str(globals().get('x')))"

    async def turn_on(machine: str, task: str, code: str) -> tuple[str | None, list[str]]:
        worker = await machines.worker_on(machine)
        model_server.script_for_task("root", task, rlm_step("Go.", code))
        turn, _ = await api.turns.submit("s", TurnSubmission(message=task))
        done = await api.turns.wait(turn.id)
        assert done.runner == worker.parts.runner
        evicted = [
            str(e.data["detail"]) async for e in await api.turns.events(turn.id) if e.type.value == "kernel.evicted"
        ]
        await worker.stop()
        machines.started.remove(worker)
        return done.answer, evicted

    assert await turn_on("a", "set one", "x = 1\n" + report) == ("1", [])
    answer, evicted = await turn_on("b", "set five", "seen = str(globals().get('x'))\nx = 5\nSUBMIT(answer=seen)")
    assert answer == "None" and evicted and "another machine" in evicted[0]
    answer, evicted = await turn_on("a", "read", report)
    assert answer == "None", "machine A brought back its stale x"
    assert evicted and "another machine" in evicted[0]


async def test_files_stored_before_the_switch_to_the_database_are_shared_at_start_up(
    machines: Machines, model_server: ScriptedModelServer
) -> None:
    local = scripted_settings(
        model_server, machines.root / "api", database_url=machines.url, sandbox_pool_size=0, worker_in_server=False
    )
    before = FleetService(local, database=Database(machines.url))
    await before.start()
    await before.sessions.create(name="s")
    await before.files.upload("s", "sales.csv", io.BytesIO(SALES))
    await before.stop()

    await machines.worker_on("api")  # the same data directory, now with worker.file_store = "database"
    other = await machines.api_on("other")
    _, path = await other.files.download("s", "files/sales.csv")
    assert path.read_bytes() == SALES


async def test_the_database_file_store_is_refused_on_sqlite(model_server: ScriptedModelServer, tmp_path: Path) -> None:
    settings = scripted_settings(
        model_server,
        tmp_path,
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'fleet.db'}",
        worker_file_store="database",
    )
    with pytest.raises(ConfigError, match="through PostgreSQL"):
        FleetService(settings)
