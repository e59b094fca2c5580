"""A small synchronous Python client of the HTTP API (used by ``fleet run --url``, ``fleet chat`` and
``fleet sessions --url``).

:meth:`FleetClient.stream_turn` submits a turn and streams its events in the same request
(``Accept: text/event-stream``); :meth:`FleetClient.follow` streams the events of a turn already
submitted. Either way, if the connection drops, the client reconnects to ``GET /turns/{id}/events``
with ``Last-Event-ID`` so no event is missed or repeated (SSE parsing by httpx-sse, retries by tenacity).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import httpx
from httpx_sse import EventSource, connect_sse
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_incrementing

from fleet_rlm.protocol.events import Event, EventType

API_PREFIX = "/api/v1"
EVENT_STREAM = "text/event-stream"
STREAM_TIMEOUT = httpx.Timeout(10.0, read=60.0)
"""Reading a stream: heartbeats come at least every 15 s, so 60 s without a byte is a dead connection."""
_TURN_LOCATION = re.compile(rf".*{re.escape(API_PREFIX)}/turns/([^/]+)")


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


def check_stream(response: httpx.Response) -> httpx.Response:
    """``_check`` for a streamed response: an error's JSON body is read first."""
    if not response.is_success:
        response.read()
        _check(response)
    return response


def _is_event_stream(response: httpx.Response) -> bool:
    media_type = str(response.headers.get("content-type", "")).partition(";")[0]
    return media_type.strip().lower() == EVENT_STREAM


class StreamEnded(ApiFailure):
    """The event stream closed before the turn's terminal event (the server may be restarting)."""

    def __init__(self, turn_id: str) -> None:
        super().__init__(0, "stream_ended", f"the event stream of turn {turn_id} ended before the turn did")


class UnreadableEvent(ApiFailure):
    """The server sent an event that breaks the event protocol (a server of another version, or a proxy
    that rewrote the stream); the message names the event and what is wrong with it."""

    def __init__(self, problem: str) -> None:
        super().__init__(0, "unreadable_event", f"the server sent an event this client cannot read: {problem}")


class UnusableLocation(ApiFailure):
    """The server accepted a turn but its ``Location`` header names no turn, so the client cannot follow it."""

    def __init__(self, status: int, location: str | None) -> None:
        shown = "none" if location is None else repr(location[:200])
        expected = f"{API_PREFIX}/turns/{{id}}"
        message = f"the answer to the turn submission has no usable Location header (expected {expected}, got {shown})"
        super().__init__(status, "unusable_location", message)


def _turn_id_from_location(response: httpx.Response) -> str:
    """The turn a submission's ``Location`` names (``/api/v1/turns/{turn_id}``)."""
    location = response.headers.get("location")
    found = _TURN_LOCATION.fullmatch(urlsplit(location).path) if location else None
    if found is None:
        raise UnusableLocation(response.status_code, location)
    return found[1]


def _read_events(source: EventSource) -> Generator[Event, None, None]:
    """The events of one SSE connection, to the terminal one; the retry hint and heartbeats are skipped."""
    for frame in source.iter_sse():
        if not frame.data or frame.event == EventType.HEARTBEAT.value:
            continue
        try:
            event = Event.from_dict(frame.json())
        except (ValueError, KeyError, TypeError) as exc:  # EventDataError is a ValueError; so is bad JSON
            raise UnreadableEvent(str(exc) if not isinstance(exc, KeyError) else f"no {exc} field") from None
        yield event
        if event.terminal:
            return


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
    """A turn's events across connections: each new connection resumes after the last seq seen.
    ``opened``: a connection already streaming them (a streamed submission's), read first."""

    def __init__(
        self, client: FleetClient, turn_id: str, after: int, opened: Generator[Event, None, None] | None = None
    ) -> None:
        self.client = client
        self.turn_id = turn_id
        self.last = after
        self._stream = opened

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


def _follow(cursor: _EventCursor, retrying: Retrying | None) -> Generator[Event, None, None]:
    """The cursor's events to the terminal one, each connection attempt under ``retrying``."""
    policy = retrying or reconnecting()
    try:
        while True:
            event = policy(cursor.next_event)
            yield event
            if event.terminal:
                return
    finally:
        cursor.close()


def _submission_events(response: httpx.Response) -> Generator[Event, None, None]:
    """The events of a streamed submission's response, which is closed when they end."""
    try:
        yield from _read_events(EventSource(response))
    finally:
        response.close()


class StreamedTurn:
    """A turn submitted by :meth:`FleetClient.stream_turn`: its id, known once the response headers
    arrived (to cancel it), and its events, read from the submission's response and, if that
    connection drops before the terminal event, from ``GET /turns/{id}/events`` after the last seq seen.
    Close it (or use it as a context manager) if its events are not read to the end."""

    def __init__(self, client: FleetClient, turn_id: str, response: httpx.Response | None) -> None:
        """``response``: the submission's, streaming the events; None to read them all by the GET."""
        self.turn_id = turn_id
        self._response = response
        opened = _submission_events(response) if response is not None else None
        self._cursor = _EventCursor(client, turn_id, 0, opened)

    def events(self, retrying: Retrying | None = None) -> Iterator[Event]:
        """Every event of the turn, in order, to the terminal one; reconnects as :meth:`FleetClient.follow`."""
        return _follow(self._cursor, retrying)

    def __iter__(self) -> Iterator[Event]:
        return self.events()

    def close(self) -> None:
        self._cursor.close()
        if self._response is not None:
            self._response.close()

    def __enter__(self) -> StreamedTurn:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _turn_body(message: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A submission's JSON: the message and the fields given (None: the server's default)."""
    return {"message": message, **{k: v for k, v in fields.items() if v is not None}}


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
        return dict(self._json("POST", f"/sessions/{ref}/turns", json=_turn_body(message, fields), headers=headers))

    def stream_turn(self, ref: str, message: str, *, idempotency_key: str | None = None, **fields: Any) -> StreamedTurn:
        """Submit a turn and stream its events in the same response: one request fewer before the
        first event than :meth:`submit_turn` then :meth:`follow`. Errors raise :class:`ApiFailure`
        before anything streams."""
        headers = {"Accept": EVENT_STREAM, **({"Idempotency-Key": idempotency_key} if idempotency_key else {})}
        body = _turn_body(message, fields)
        request = self.http.build_request(
            "POST", f"/sessions/{ref}/turns", json=body, headers=headers, timeout=STREAM_TIMEOUT
        )
        response = self.http.send(request, stream=True)
        try:
            turn_id = _turn_id_from_location(check_stream(response))
        except BaseException:
            response.close()
            raise
        if not _is_event_stream(response):  # a server from before the streamed submission: the turn as JSON
            response.close()
            return StreamedTurn(self, turn_id, None)
        return StreamedTurn(self, turn_id, response)

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
        url = f"/turns/{turn_id}/events"
        with connect_sse(self.http, "GET", url, headers=headers, timeout=STREAM_TIMEOUT) as source:
            check_stream(source.response)
            yield from _read_events(source)

    def follow(self, turn_id: str, *, after: int = 0, retrying: Retrying | None = None) -> Iterator[Event]:
        """Every event of the turn after ``after``, in order, to the terminal one, reconnecting
        after drops with ``Last-Event-ID`` (by :func:`reconnecting`, unless ``retrying`` says otherwise;
        each event received starts its count afresh)."""
        return _follow(_EventCursor(self, turn_id, after), retrying)
