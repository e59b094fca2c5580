from __future__ import annotations

import hashlib
import io

import httpx
import pytest

from fleet_rlm.testing.settings import SettingsFactory

from .server import RunningServer, server_in_thread

CSV = b"region,revenue\nnorth,100\nsouth,80\n"


def test_upload_list_download_with_etag_and_delete(api: RunningServer) -> None:
    with api.http() as http:
        http.post("/sessions", json={"name": "s"})
        uploaded = http.post("/sessions/s/files", files={"file": ("sales.csv", CSV, "text/csv")})
        assert uploaded.status_code == 201
        digest = hashlib.sha256(CSV).hexdigest()
        assert uploaded.json()["path"] == "files/sales.csv" and uploaded.json()["sha256"] == digest

        nested = http.post("/sessions/s/files", files={"file": ("x", b"{}")}, data={"path": "raw/config.json"})
        assert nested.json()["path"] == "files/raw/config.json"

        listed = http.get("/sessions/s/files").json()["items"]
        assert [(f["path"], f["size"], f["kind"], f["origin"]) for f in listed] == [
            ("files/raw/config.json", 2, "json", "upload"),
            ("files/sales.csv", len(CSV), "csv", "upload"),
        ]

        download = http.get("/sessions/s/files/files/sales.csv")
        assert download.status_code == 200 and download.content == CSV
        assert download.headers["etag"] == f'"{digest}"'
        assert (
            http.get("/sessions/s/files/files/sales.csv", headers={"If-None-Match": f'"{digest}"'}).status_code == 304
        )

        replaced = http.post("/sessions/s/files", files={"file": ("sales.csv", b"a\n1\n")})
        assert replaced.json()["sha256"] == hashlib.sha256(b"a\n1\n").hexdigest()

        assert http.delete("/sessions/s/files/files/sales.csv").status_code == 204
        missing = http.get("/sessions/s/files/files/sales.csv")
        assert missing.status_code == 404 and missing.json()["code"] == "file_not_found"


@pytest.mark.parametrize("path", ["../escape.csv", "/etc/passwd", "a/../../b", "back\\slash"])
def test_upload_to_a_bad_path_is_refused(api: RunningServer, path: str) -> None:
    with api.http() as http:
        http.post("/sessions", json={"name": "s"})
        refused = http.post("/sessions/s/files", files={"file": ("x.csv", CSV)}, data={"path": path})
        assert refused.status_code == 400, refused.text
        assert refused.json()["code"] == "invalid_path"
        assert http.get("/sessions/s/files").json()["items"] == []


@pytest.mark.parametrize("path", ["files/%2E%2E/%2E%2E/etc/passwd", "%2Fetc%2Fpasswd", "tmp/scratch", "files"])
def test_download_of_a_bad_path_is_refused(api: RunningServer, path: str) -> None:
    with api.http() as http:
        http.post("/sessions", json={"name": "s"})
        refused = http.get(httpx.URL(f"{api.base_url}/api/v1/sessions/s/files/{path}"))
        assert refused.status_code == 400, refused.text
        assert refused.json()["code"] == "invalid_path"


def test_oversize_upload_gets_413_with_or_without_a_length(make_settings: SettingsFactory) -> None:
    with server_in_thread(make_settings(upload_limit_mb=1, sandbox_pool_size=0)) as api, api.http() as http:
        http.post("/sessions", json={"name": "s"})
        big = b"x" * (1024 * 1024 + 100_000)
        declared = http.post("/sessions/s/files", files={"file": ("big.bin", big)})
        assert declared.status_code == 413 and declared.json()["code"] == "upload_too_large"

        boundary = "fleetboundary"
        body = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n\r\n'.encode()
            + big
            + f"\r\n--{boundary}--\r\n".encode()
        )

        def chunks() -> object:
            stream = io.BytesIO(body)
            while chunk := stream.read(65536):
                yield chunk

        streamed = http.post(
            "/sessions/s/files",
            content=chunks(),  # type: ignore[arg-type]
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
        )
        assert streamed.status_code == 413 and streamed.json()["code"] == "upload_too_large"
        assert http.get("/sessions/s/files").json()["items"] == []


def test_malformed_upload_forms_are_refused_and_store_nothing(api: RunningServer) -> None:
    with api.http() as http:
        http.post("/sessions", json={"name": "s"})
        no_file = http.post("/sessions/s/files", data={"path": "x.csv"})
        assert no_file.status_code == 422 and no_file.json()["code"] == "invalid_request"
        assert "file" in no_file.json()["message"]
        two_files = http.post("/sessions/s/files", files=[("file", ("a.csv", CSV)), ("file", ("b.csv", CSV))])
        assert two_files.status_code == 400 and "files" in two_files.json()["message"].lower()
        unnamed = http.post("/sessions/s/files", files={"file": ("", CSV)})
        assert unnamed.status_code == 422 and unnamed.json()["code"] == "invalid_request"
        elsewhere = http.post("/sessions/nope/files", files={"file": ("a.csv", CSV)})
        assert elsewhere.status_code == 404 and elsewhere.json()["code"] == "session_not_found"
        no_archive = http.post("/sessions/import", data={"name": "x"})
        assert no_archive.status_code == 422 and "archive" in no_archive.json()["message"]
        assert http.get("/sessions/s/files").json()["items"] == []
        assert [s["name"] for s in http.get("/sessions").json()["items"]] == ["s"]
