"""Finding the server ``fleet chat`` talks to: ``--url``, a server already on the configured
loopback port, or one started in the background for this chat (and stopped when it ends).

The background server runs in its own session (process group), so a Ctrl-C typed into the chat
reaches only the chat, and it ends when the chat process does, however that ends (see
:mod:`fleet_rlm.clients.terminal.background_server`); its log goes to
``<data dir>/logs/chat-server.log``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from fleet_rlm.api.client import API_PREFIX
from fleet_rlm.config import Settings

START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
LOG_NAME = "chat-server.log"


class ConnectError(RuntimeError):
    """No server can be reached or started; the message says what to do."""


@dataclass
class Connection:
    url: str
    token: str | None
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @property
    def started_here(self) -> bool:
        return self.process is not None

    def close(self) -> None:
        """Stop the server this chat started (a server found running is left alone)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT)


def _probe(url: str, token: str | None) -> bool | None:
    """True: a Fleet server answers; False: something else does; None: nothing listens."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(url + API_PREFIX + "/health", headers=headers, timeout=3.0)
    except httpx.TransportError:
        return None
    with contextlib.suppress(ValueError):
        return response.status_code == 200 and response.json().get("status") == "ok"
    return False


def connect(settings: Settings, url: str | None) -> Connection:
    token = settings.server.api_token.get_secret_value() if settings.server.api_token else None
    if url:
        url = url.rstrip("/")
        if _probe(url, token) is None:
            raise ConnectError(f"cannot reach a Fleet server at {url}")
        return Connection(url, token)
    local = f"http://127.0.0.1:{settings.server.port}"
    found = _probe(local, token)
    if found:
        return Connection(local, token)
    if found is False:
        raise ConnectError(
            f"port {settings.server.port} is taken by something that is not a Fleet server; "
            "set FLEET_SERVER_PORT to a free port or pass --url"
        )
    return _start(settings, local, token)


def _start(settings: Settings, url: str, token: str | None) -> Connection:
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
    log = settings.logs_dir / LOG_NAME
    command = [
        sys.executable, "-m", "fleet_rlm.clients.terminal.background_server", str(os.getpid()),
        "--host", "127.0.0.1", "--port", str(settings.server.port),
    ]  # fmt: skip
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    connection = Connection(url, token, process, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
                raise ConnectError(f"the background server exited at start: {tail[0]} (log: {log})")
            if _probe(url, token):
                return connection
            time.sleep(0.1)
        raise ConnectError(f"the background server did not answer within {START_TIMEOUT:.0f}s (log: {log})")
    except BaseException:  # including Ctrl-C while waiting: never leave the server behind
        connection.close()
        raise
