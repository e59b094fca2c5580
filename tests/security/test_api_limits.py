"""Every body is bounded while it streams: JSON bodies, uploads (chunked too) and session imports,
however small the archive is packed; the server's memory stays flat."""

from __future__ import annotations

import contextlib
import json
import select
import socket
from pathlib import Path

import pytest

from fleet_rlm.testing.processes import peak_rss_bytes
from tests.api.server import ServerProcess

from . import bombs
from .api_server import StartServer, fleet_serve, http, serve_env

__all__ = ["fleet_serve", "serve_env"]

MIB = 1024 * 1024
RSS_ALLOWANCE = 96 * MIB
"""How much a server's peak memory may grow while it refuses hostile bodies (each is far larger)."""


def _raw_request(server: ServerProcess, head: str, chunks: int = 0, chunk: bytes = b"") -> tuple[int, bytes]:
    """Send ``head`` then up to ``chunks`` chunked-encoded ``chunk``s until the server answers or
    closes; returns how many body bytes got out, and the response (or what arrived of it)."""
    sent = 0
    response = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head.encode())
        framed = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for _ in range(chunks):
                if select.select([sock], [], [], 0)[0]:
                    break
                sock.sendall(framed)
                sent += len(chunk)
        with contextlib.suppress(ConnectionResetError, TimeoutError):
            while data := sock.recv(65536):
                response += data
    return sent, response


def _status_and_body(response: bytes) -> tuple[int, dict[str, str]]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def test_a_json_body_over_the_limit_is_refused_with_413(fleet_serve: StartServer) -> None:
    server = fleet_serve(FLEET_JSON_BODY_LIMIT_KB="64")
    big = json.dumps({"name": "big", "title": "t", "settings": {"x": "y" * 100_000}}).encode()
    with http(server) as client:
        declared = client.post("/sessions", content=big, headers={"Content-Type": "application/json"})
        chunked = client.post(
            "/sessions", content=iter([big[:50_000], big[50_000:]]), headers={"Content-Type": "application/json"}
        )
        for response in (declared, chunked):
            assert response.status_code == 413, response.text
            assert response.json()["code"] == "body_too_large"
            assert "64 KiB" in response.json()["message"] and "FLEET_JSON_BODY_LIMIT_KB" in response.json()["message"]
        assert client.get("/sessions").json()["items"] == []
        assert client.post("/sessions", json={"name": "small"}).status_code == 201


def test_an_oversize_upload_is_cut_off_without_reading_the_rest(fleet_serve: StartServer, home: Path) -> None:
    server = fleet_serve(FLEET_UPLOAD_LIMIT_MB="1")
    with http(server) as client:
        client.post("/sessions", json={"name": "s"})
        baseline = peak_rss_bytes(server.pid)

    declared_head = (
        f"POST /api/v1/sessions/s/files HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        "Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 1073741824\r\n\r\n"
    )
    sent, response = _raw_request(server, declared_head)
    status, body = _status_and_body(response)
    assert (status, body["code"]) == (413, "upload_too_large") and "1 MiB" in body["message"]
    assert b"connection: close" in response.lower()

    part = '--b\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n\r\n'
    chunked_head = (
        f"POST /api/v1/sessions/s/files HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        "Content-Type: multipart/form-data; boundary=b\r\nTransfer-Encoding: chunked\r\n\r\n"
        f"{len(part):x}\r\n{part}\r\n"
    )
    sent, response = _raw_request(server, chunked_head, chunks=4096, chunk=b"x" * 65536)
    assert sent < 24 * MIB, f"the server kept reading: {sent} bytes of a 256 MiB upload went out"
    if response:
        status, body = _status_and_body(response)
        assert (status, body["code"]) == (413, "upload_too_large")

    with http(server) as client:
        assert client.get("/sessions/s/files").json()["items"] == []
    stored = [p for p in (home / "sessions").rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in stored) == 0, stored
    assert peak_rss_bytes(server.pid) - baseline < RSS_ALLOWANCE


BOMBS = {
    "blobs unpacking past the limit": (
        lambda: bombs.blob_bomb(members=40, megabytes_each=48),
        {"FLEET_IMPORT_UNPACKED_LIMIT_MB": "64"},
        413,
        "archive_too_large",
        "FLEET_IMPORT_UNPACKED_LIMIT_MB",
    ),
    "one blob past the file limit": (
        lambda: bombs.blob_bomb(members=1, megabytes_each=48),
        {"FLEET_IMPORT_FILE_LIMIT_MB": "16"},
        413,
        "archive_too_large",
        "FLEET_IMPORT_FILE_LIMIT_MB",
    ),
    "an event line of 300 MiB": (lambda: bombs.event_line_bomb(300), {}, 400, "invalid_archive", "longer than"),
    "too many entries": (
        lambda: bombs.entries_bomb(5000),
        {"FLEET_IMPORT_MAX_ENTRIES": "1000"},
        413,
        "archive_too_large",
        "FLEET_IMPORT_MAX_ENTRIES",
    ),
    "an extended header of 200 MiB": (lambda: bombs.header_bomb(200), {}, 400, "invalid_archive", "header"),
    "a manifest of empty objects": (lambda: bombs.manifest_bomb(6), {}, 400, "invalid_archive", "JSON values"),
    "a blob the manifest does not list": (lambda: bombs.unlisted_blob(512), {}, 400, "invalid_archive", "not listed"),
}


@pytest.mark.parametrize("bomb", list(BOMBS))
def test_a_hostile_archive_is_refused_with_memory_and_disk_bounded(
    fleet_serve: StartServer, home: Path, bomb: str
) -> None:
    build, env, status, code, says = BOMBS[bomb]
    archive = build()
    assert len(archive) < 4 * MIB
    server = fleet_serve(**env)
    with http(server) as client:
        client.get("/sessions")
        baseline = peak_rss_bytes(server.pid)
        refused = client.post("/sessions/import", files={"archive": ("bomb.fleet.tar.gz", archive)})
        assert refused.status_code == status, refused.text
        assert refused.json()["code"] == code and says in refused.json()["message"], refused.json()
        assert client.get("/sessions").json()["items"] == []
    assert peak_rss_bytes(server.pid) - baseline < RSS_ALLOWANCE
    sessions = home / "sessions"
    assert not sessions.exists() or not any(sessions.iterdir()), "the refused import left files behind"


def test_an_archive_over_the_packed_limit_is_refused_before_it_is_read(fleet_serve: StartServer) -> None:
    server = fleet_serve(FLEET_IMPORT_LIMIT_MB="1")
    with http(server) as client:
        refused = client.post("/sessions/import", files={"archive": ("big.tar.gz", b"\0" * (2 * MIB))})
        assert refused.status_code == 413 and refused.json()["code"] == "archive_too_large"
        assert "FLEET_IMPORT_LIMIT_MB" in refused.json()["message"]
