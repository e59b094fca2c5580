"""A small synchronous Python client of the HTTP API (used by ``fleet run --url`` and ``fleet sessions --url``).

:meth:`FleetClient.follow` streams a turn's events and, if the connection drops, reconnects with
``Last-Event-ID`` so no event is missed or repeated (SSE parsing by httpx-sse, retries by tenacity).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import httpx
from httpx_sse import connect_sse
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_incrementing

from fleet_rlm.protocol.events import Event, EventType

API_PREFIX = "/api/v1"


class ApiFailure(RuntimeError):
    """The server answered with an error; ``code`` is its stable error code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} ({code}, HTTP {status})")
        self.status = status
        self.code = code
        self.message = message


def _check(response: httpx.Response) -> httpx.Response:
    if response.is_success or response.status_code == 304:
        return response
    try:
        body = response.json()
        code, message = str(body["code"]), str(body["message"])
    except (ValueError, KeyError, TypeError):
        code, message = f"http_{response.status_code}", response.text[:200] or response.reason_phrase
    raise ApiFailure(response.status_code, code, message)


class StreamEnded(ApiFailure):
    """The event stream closed before the turn's terminal event (the server may be restarting)."""

    def __init__(self, turn_id: str) -> None:
        super().__init__(0, "stream_ended", f"the event stream of turn {turn_id} ended before the turn did")


RECONNECT_WAIT = wait_incrementing(start=0.2, increment=0.2, max=2.0)
"""Between reconnects: 0.2 s more each time, at most 2 s."""


def reconnecting(retries: int = 20) -> Retrying:
    """Reconnect up to ``retries`` times in a row without an event in between; then the last error
    (a transport error, or :class:`StreamEnded`) is raised."""
    return Retrying(
        stop=stop_after_attempt(retries + 1),
        wait=RECONNECT_WAIT,
        retry=retry_if_exception_type((httpx.TransportError, StreamEnded)),
        reraise=True,
    )


class _EventCursor:
    """A turn's events across connections: each new connection resumes after the last seq seen."""

    def __init__(self, client: FleetClient, turn_id: str, after: int) -> None:
        self.client = client
        self.turn_id = turn_id
        self.last = after
        self._stream: Generator[Event, None, None] | None = None

    def next_event(self) -> Event:
        try:
            if self._stream is None:
                self._stream = self.client.events(self.turn_id, after=self.last)
            event = next(self._stream)
        except StopIteration:
            self.close()
            raise StreamEnded(self.turn_id) from None
        except BaseException:
            self.close()
            raise
        self.last = event.seq
        return event

    def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()


class FleetClient:
    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.http = httpx.Client(base_url=self.base_url + API_PREFIX, headers=headers, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> FleetClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _json(self, method: str, url: str, **kwargs: Any) -> Any:
        return _check(self.http.request(method, url, **kwargs)).json()

    # Sessions ---------------------------------------------------------------------------------

    def create_session(self, **fields: Any) -> dict[str, Any]:
        return dict(self._json("POST", "/sessions", json=fields))

    def sessions(self, *, limit: int = 200) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        offset: int | None = 0
        while offset is not None:
            page = self._json("GET", "/sessions", params={"limit": limit, "offset": offset})
            found.extend(page["items"])
            offset = page["next_offset"]
        return found

    def session(self, ref: str) -> dict[str, Any]:
        return dict(self._json("GET", f"/sessions/{ref}"))

    def kernel(self, ref: str) -> dict[str, Any]:
        """The session's kernel: live or not, idle for, memory, variables, snapshot."""
        return dict(self._json("GET", f"/sessions/{ref}/kernel"))

    def restart_kernel(self, ref: str) -> dict[str, Any]:
        return dict(self._json("POST", f"/sessions/{ref}/kernel/restart"))

    def delete_session(self, ref: str) -> None:
        _check(self.http.delete(f"/sessions/{ref}"))

    def export_session(self, ref: str, destination: Path) -> None:
        with self.http.stream("GET", f"/sessions/{ref}/export") as response:
            if not response.is_success:
                response.read()
                _check(response)
            with destination.open("wb") as out:
                for chunk in response.iter_bytes():
                    out.write(chunk)

    def import_session(self, archive: Path, *, name: str | None = None) -> dict[str, Any]:
        with archive.open("rb") as handle:
            data = {"name": name} if name else None
            return dict(self._json("POST", "/sessions/import", files={"archive": (archive.name, handle)}, data=data))

    # Files ------------------------------------------------------------------------------------

    def upload(self, ref: str, source: Path | BinaryIO, path: str | None = None) -> dict[str, Any]:
        data = {"path": path} if path else None
        if isinstance(source, Path):
            with source.open("rb") as handle:
                return dict(
                    self._json("POST", f"/sessions/{ref}/files", files={"file": (source.name, handle)}, data=data)
                )
        return dict(self._json("POST", f"/sessions/{ref}/files", files={"file": ("upload", source)}, data=data))

    def files(self, ref: str) -> list[dict[str, Any]]:
        return list(self._json("GET", f"/sessions/{ref}/files")["items"])

    def download(self, ref: str, path: str) -> bytes:
        return _check(self.http.get(f"/sessions/{ref}/files/{path}")).content

    # Memory -----------------------------------------------------------------------------------

    def memories(self, *, status: str | None = None, session: str | None = None) -> list[dict[str, Any]]:
        """Every memory entry (of ``status``, proposed in ``session``, when given), oldest proposal first."""
        found: list[dict[str, Any]] = []
        offset: int | None = 0
        filters = {k: v for k, v in {"status": status, "session": session}.items() if v is not None}
        while offset is not None:
            page = self._json("GET", "/memory", params={**filters, "limit": 500, "offset": offset})
            found.extend(page["items"])
            offset = page["next_offset"]
        return found

    def approve_memory(self, entry_id: str, text: str | None = None) -> dict[str, Any]:
        body = {"text": text} if text is not None else None
        return dict(self._json("POST", f"/memory/{entry_id}/approve", json=body))

    def reject_memory(self, entry_id: str) -> dict[str, Any]:
        return dict(self._json("POST", f"/memory/{entry_id}/reject"))

    def delete_memory(self, entry_id: str) -> None:
        _check(self.http.delete(f"/memory/{entry_id}"))

    # Turns ------------------------------------------------------------------------------------

    def submit_turn(
        self, ref: str, message: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = {"message": message, **{k: v for k, v in fields.items() if v is not None}}
        return dict(self._json("POST", f"/sessions/{ref}/turns", json=body, headers=headers))

    def turn(self, turn_id: str) -> dict[str, Any]:
        return dict(self._json("GET", f"/turns/{turn_id}"))

    def turns(self, ref: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        after: int | None = 0
        while after is not None:
            page = self._json("GET", f"/sessions/{ref}/turns", params={"after": after, "limit": 200})
            found.extend(page["items"])
            after = page["next_after"]
        return found

    def cancel(self, turn_id: str) -> dict[str, Any]:
        return dict(self._json("POST", f"/turns/{turn_id}/cancel"))

    def events(self, turn_id: str, after: int = 0) -> Generator[Event, None, None]:
        """One connection's worth of events (heartbeats skipped); ends at the terminal event or
        when the connection ends."""
        headers = {"Last-Event-ID": str(after)} if after else {}
        timeout = httpx.Timeout(10.0, read=60.0)
        url = f"/turns/{turn_id}/events"
        with connect_sse(self.http, "GET", url, headers=headers, timeout=timeout) as source:
            if not source.response.is_success:
                source.response.read()
                _check(source.response)
            for frame in source.iter_sse():
                if not frame.data or frame.event == EventType.HEARTBEAT.value:
                    continue  # the retry hint and heartbeats
                event = Event.from_dict(frame.json())
                yield event
                if event.terminal:
                    return

    def follow(self, turn_id: str, *, after: int = 0, retrying: Retrying | None = None) -> Iterator[Event]:
        """Every event of the turn after ``after``, in order, to the terminal one, reconnecting
        after drops with ``Last-Event-ID`` (by :func:`reconnecting`, unless ``retrying`` says otherwise;
        each event received starts its count afresh)."""
        policy = retrying or reconnecting()
        cursor = _EventCursor(self, turn_id, after)
        try:
            while True:
                event = policy(cursor.next_event)
                yield event
                if event.terminal:
                    return
        finally:
            cursor.close()
