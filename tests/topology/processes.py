"""Starting, stopping and killing the processes of a topology, and reading which worker runs a turn."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import asyncpg

from fleet_rlm.api.client import FleetClient
from tests.api.server import ServerProcess


class WorkerProcess:
    """``fleet worker`` in a child process."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._env = {**os.environ, **env}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> WorkerProcess:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "fleet_rlm", "worker"], env=self._env, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 120
        while b"runs turns from" not in self.log.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM (a drain), then wait for the exit; returns the exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Topology:
    def __init__(self, env: dict[str, str], logs: Path, database_url: str) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        self.env = env
        self.logs = logs
        self.dsn = database_url.replace("postgresql+asyncpg://", "postgresql://", 1)
        self.replicas: list[ServerProcess] = []
        self.workers: list[WorkerProcess] = []
        self._clients: list[FleetClient] = []
        self._started = 0

    def start(self, replicas: int = 2, workers: int = 2) -> Topology:
        for _ in range(replicas):
            self.add_replica()
        for _ in range(workers):
            self.add_worker()
        return self

    def add_replica(self) -> ServerProcess:
        replica = ServerProcess(self.env, self._log("replica"))
        self.replicas.append(replica)
        return replica.start()

    def add_worker(self) -> WorkerProcess:
        worker = WorkerProcess(self.env, self._log("worker"))
        self.workers.append(worker)  # stopped with the topology even if it never comes up
        return worker.start()

    def _log(self, kind: str) -> Path:
        self._started += 1
        return self.logs / f"{self._started:02d}-{kind}.log"

    def client(self, replica: int) -> FleetClient:
        """A client of the replica; closed when the topology stops."""
        client = FleetClient(self.replicas[replica].base_url)
        self._clients.append(client)
        return client

    def runner_of(self, turn_id: str) -> str | None:
        """The runner id (``host:pid:nonce``) that claimed the turn, straight from the database."""
        return asyncio.run(self._fetch("SELECT runner FROM turns WHERE id = $1", turn_id))

    def worker_running(self, turn_id: str) -> WorkerProcess:
        runner = self.runner_of(turn_id)
        assert runner is not None, f"no worker claimed {turn_id}"
        pid = int(runner.rsplit(":", 2)[1])
        return next(w for w in self.workers if w.running() and w.pid == pid)

    async def _fetch(self, query: str, *args: object) -> str | None:
        connection = await asyncpg.connect(self.dsn, timeout=5)
        try:
            value = await connection.fetchval(query, *args)
            return None if value is None else str(value)
        finally:
            await connection.close()

    def stop(self) -> None:
        for client in self._clients:
            client.close()
        for worker in self.workers:
            if worker.running():
                worker.kill()
        for replica in self.replicas:
            replica.stop()
