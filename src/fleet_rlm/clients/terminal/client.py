"""The HTTP client ``fleet chat`` uses: :class:`~fleet_rlm.api.client.FleetClient` plus the few
calls only an interactive client needs (changing a session, streaming a download to disk)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from fleet_rlm.api.client import ApiFailure, FleetClient, check_stream

DOWNLOAD_CHUNK = 1024 * 1024


class DigestMismatch(RuntimeError):
    """The downloaded bytes do not have the sha256 the server listed."""


class ChatClient(FleetClient):
    def update_session(self, ref: str, **changes: Any) -> dict[str, Any]:
        return dict(self._json("PATCH", f"/sessions/{ref}", json=changes))

    def session_or_none(self, ref: str) -> dict[str, Any] | None:
        try:
            return self.session(ref)
        except ApiFailure as exc:
            if exc.status == 404:
                return None
            raise

    def download_to(self, ref: str, path: str, destination: Path, expected_sha256: str) -> int:
        """Stream the file to ``destination`` (via a ``.partial`` file), verifying its sha256; returns its size."""
        partial = destination.with_name(destination.name + ".partial")
        digest = hashlib.sha256()
        size = 0
        try:
            with self.http.stream("GET", f"/sessions/{ref}/files/{path}") as response:
                check_stream(response)
                with partial.open("wb") as out:
                    for chunk in response.iter_bytes(DOWNLOAD_CHUNK):
                        digest.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
            if digest.hexdigest() != expected_sha256:
                raise DigestMismatch(
                    f"{path}: downloaded sha256 {digest.hexdigest()[:12]}… differs from the listed "
                    f"{expected_sha256[:12]}…; nothing saved"
                )
            partial.replace(destination)
        finally:
            partial.unlink(missing_ok=True)
        return size
