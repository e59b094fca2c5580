"""The real API server for tests: uvicorn on a free loopback port, in a thread or a subprocess."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn

from fleet_rlm.api.app import create_app
from fleet_rlm.api.client import FleetClient
from fleet_rlm.config import Settings
from fleet_rlm.service.service import FleetService


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class RunningServer:
    base_url: str
    settings: Settings

    def client(self, token: str | None = None) -> FleetClient:
        return FleetClient(self.base_url, token=token)

    def http(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.base_url + "/api/v1", timeout=30, **kwargs)  # type: ignore[arg-type]


@contextlib.contextmanager
def server_in_thread(settings: Settings, service: FleetService | None = None) -> Iterator[RunningServer]:
    """The app on a free port; with ``service``, over that one (a test may hold its calls at a gate)."""
    app = create_app(settings, service)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the API server did not start")
        time.sleep(0.01)
    try:
        yield RunningServer(f"http://127.0.0.1:{port}", settings)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


class ServerProcess:
    """``fleet serve``'s app in a child process (so a test can kill -9 it); with ``cli``, the
    ``fleet serve`` command itself. Its output (uvicorn's access log included) goes to ``log``."""

    def __init__(self, env: dict[str, str], log: Path, *, cli: bool = False) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._env = {**os.environ, **env}
        self._cli = cli
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> ServerProcess:
        module = ["fleet_rlm", "serve"] if self._cli else ["fleet_rlm.api.server"]
        command = [sys.executable, "-m", *module, "--host", "127.0.0.1", "--port", str(self.port)]
        token = self._env.get("FLEET_API_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(command, env=self._env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.base_url + "/api/v1/health", headers=headers, timeout=1).status_code == 200:
                    return self
            time.sleep(0.05)
        raise RuntimeError(f"server did not come up: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
