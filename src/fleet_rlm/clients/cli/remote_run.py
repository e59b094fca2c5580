"""``fleet run --url``: one turn through a Fleet server, streamed like a local ``fleet run``.

Creates a session (or uses ``--session``), uploads the ``--file`` inputs, submits the turn with an
idempotency key and streams its events in the same request (``Accept: text/event-stream``; if the
connection drops, it continues with ``GET /turns/{id}/events`` and ``Last-Event-ID``), and exits
with the same codes as a local ``fleet run`` (clients/cli/exit_codes.py). Ctrl-C asks the server to
cancel the turn.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console

from fleet_rlm.api.client import ApiFailure, FleetClient, StreamedTurn
from fleet_rlm.clients.cli.exit_codes import EXIT_FAILED, exit_code_for
from fleet_rlm.clients.cli.render import EventRenderer, json_line
from fleet_rlm.protocol.events import EventType
from fleet_rlm.protocol.status import TurnStatus


def run_remote(
    url: str,
    task: str,
    *,
    files: list[Path],
    as_json: bool,
    context_paths: list[str],
    token: str | None = None,
    session: str | None = None,
    mode: str | None = None,
    max_iterations: int | None = None,
    max_model_calls: int | None = None,
    turn_timeout: float | None = None,
    download_to: Path | None = None,
) -> int:
    """Returns the exit code."""
    console = Console(highlight=False)
    renderer = EventRenderer(console)
    try:
        with FleetClient(url, token=token) as client:
            session_id = str(
                client.session(session)["id"] if session else client.create_session(title=task[:200])["id"]
            )
            for path in files:
                client.upload(session_id, path)
            with client.stream_turn(
                session_id,
                task,
                idempotency_key=uuid.uuid4().hex,
                context_paths=context_paths,
                mode=mode,
                max_iterations=max_iterations,
                max_model_calls=max_model_calls,
                turn_timeout=turn_timeout,
            ) as turn:
                status = _follow(client, turn, renderer, as_json)
            final = client.turn(turn.turn_id)
            if download_to is not None and status is EventType.TURN_COMPLETED:
                _download(client, session_id, final["artifacts"], download_to, console)
            if not as_json:
                console.print(f"[dim]session: {session_id}  turn: {turn.turn_id}[/dim]")
    except ApiFailure as exc:
        print(f"fleet: error: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        print(f"fleet: error: cannot reach {url}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    final_status = TurnStatus(final["status"])
    reason = final.get("unverified_reason") if final_status is TurnStatus.COMPLETED else final.get("error")
    return exit_code_for(final_status, unverified=bool(final.get("unverified")), reason=reason)


def _follow(client: FleetClient, turn: StreamedTurn, renderer: EventRenderer, as_json: bool) -> EventType | None:
    def cancel(_signum: int, _frame: FrameType | None) -> None:
        # A separate connection: the streaming one is busy in this very thread.
        with contextlib.suppress(ApiFailure), FleetClient(client.base_url, token=client.token) as canceller:
            canceller.cancel(turn.turn_id)

    previous = signal.signal(signal.SIGINT, cancel)
    try:
        last: EventType | None = None
        for event in turn.events():
            if as_json:
                json_line(event, sys.stdout)
            else:
                renderer.render(event)
            last = event.type
        return last
    finally:
        signal.signal(signal.SIGINT, previous)


def _download(
    client: FleetClient, session_id: str, artifacts: list[dict[str, Any]], target: Path, console: Console
) -> None:
    for artifact in artifacts:
        relative = str(artifact["path"]).removeprefix("artifacts/")
        destination = (target / relative).resolve()
        if not destination.is_relative_to(target.resolve()):
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(client.download(session_id, str(artifact["path"])))
        console.print(f"[dim]saved {destination}[/dim]")
