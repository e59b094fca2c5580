"""Downloads answer conditional and range requests as the OpenAPI document says: 304, 206 with one
range, 416 as the API's JSON error; a range that is malformed, multi-part or ruled out by If-Range
gets the whole file (200). Every answer's media type is one a client can parse."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Iterator

import httpx
import pytest

from .server import RunningServer

DATA = bytes(range(256)) * 4  # 1024 bytes
ETAG = f'"{hashlib.sha256(DATA).hexdigest()}"'
URL = "/sessions/s/files/files/data.bin"


@pytest.fixture
def http(api: RunningServer) -> Iterator[httpx.Client]:
    with api.http() as client:
        client.post("/sessions", json={"name": "s"})
        assert client.post("/sessions/s/files", files={"file": ("data.bin", DATA)}).status_code == 201
        yield client


def test_if_none_match_gives_304_for_the_files_etag(http: httpx.Client) -> None:
    whole = http.get(URL)
    assert whole.status_code == 200 and whole.content == DATA and whole.headers["etag"] == ETAG
    for header in (ETAG, f'"other", {ETAG}', f"W/{ETAG}", "*"):
        cached = http.get(URL, headers={"If-None-Match": header})
        assert cached.status_code == 304 and cached.content == b"" and cached.headers["etag"] == ETAG
    assert http.get(URL, headers={"If-None-Match": '"other"'}).status_code == 200


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [("bytes=0-9", 0, 9), ("bytes=1000-", 1000, 1023), ("bytes=-24", 1000, 1023), ("bytes=1020-5000", 1020, 1023)],
)
def test_one_range_gives_206_with_its_bytes(http: httpx.Client, header: str, first: int, last: int) -> None:
    part = http.get(URL, headers={"Range": header})
    assert part.status_code == 206, part.text
    assert part.content == DATA[first : last + 1]
    assert part.headers["content-range"] == f"bytes {first}-{last}/{len(DATA)}"
    assert part.headers["content-type"] == "application/octet-stream"
    matching = http.get(URL, headers={"Range": header, "If-Range": ETAG})
    assert matching.status_code == 206 and matching.content == part.content


@pytest.mark.parametrize("header", ["bytes=1024-", "bytes=5000-6000", "bytes=-0"])
def test_a_range_past_the_end_gives_416_as_a_json_error(http: httpx.Client, header: str) -> None:
    refused = http.get(URL, headers={"Range": header})
    assert refused.status_code == 416
    assert refused.headers["content-type"] == "application/json"
    assert refused.json()["code"] == "range_not_satisfiable"
    assert refused.headers["content-range"] == f"bytes */{len(DATA)}"


@pytest.mark.parametrize(
    "headers",
    [
        {"Range": "bytes=0-1,5-6"},
        {"Range": "bytes=9-2"},
        {"Range": "lines=1-2"},
        {"Range": "bytes=abc"},
        {"Range": "bytes=²-".encode()},
        {"Range": "bytes=0-9", "If-Range": '"stale"'},
        {"Range": "bytes=0-9", "If-Range": f"W/{ETAG}"},
    ],
)
def test_a_range_it_does_not_serve_gets_the_whole_file(http: httpx.Client, headers: dict[str, str | bytes]) -> None:
    whole = http.get(URL, headers=headers)
    assert whole.status_code == 200 and whole.content == DATA
    assert whole.headers["content-type"] == "application/octet-stream"


def test_an_export_is_always_whole(http: httpx.Client) -> None:
    exported = http.get("/sessions/s/export", headers={"Range": "bytes=0-9"})
    assert exported.status_code == 200 and exported.headers["content-type"] == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(exported.content), mode="r:gz") as archive:
        assert "manifest.json" in archive.getnames()


@pytest.mark.parametrize(
    ("declared", "served"),
    [
        ("image/png", "image/png"),
        ("Text/Markdown; charset=latin-1", "text/markdown"),
        ("nonsense", None),
        ("a/b c", None),
    ],
)
def test_a_declared_media_type_is_kept_only_when_well_formed(
    http: httpx.Client, declared: str, served: str | None
) -> None:
    stored = http.post("/sessions/s/files", files={"file": ("blob", b"x", declared)})
    assert stored.json()["media_type"] == (served or "application/octet-stream")
    read = http.get("/sessions/s/files/files/blob")
    assert read.headers["content-type"].split(";")[0] == (served or "application/octet-stream")
