"""Following one turn live: events rendered above a status line, reconnects, Ctrl-C.

A turn the chat sends streams in the response to its submission; one already running (found when a
session is reopened) streams from ``GET /turns/{id}/events``. Either way, the stream resumes after
the last event seen (``GET`` with ``Last-Event-ID``) whenever the connection drops,
so a server restart or a network blip shows nothing twice and misses nothing. The first Ctrl-C
asks the server to cancel the turn and keeps following it to its end; a second one quits.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import NoReturn

import httpx
from rich.console import Console, RenderableType
from rich.live import Live
from rich.text import Text
from tenacity import RetryCallState, Retrying, retry_if_exception

from fleet_rlm.api.client import RECONNECT_WAIT, ApiFailure, FleetClient, StreamedTurn, StreamEnded
from fleet_rlm.clients.cli.render import EventRenderer
from fleet_rlm.clients.terminal.status import StatusLine
from fleet_rlm.protocol.events import Event

RECONNECT_PATIENCE = 90.0


class QuitRequested(Exception):
    """Ctrl-C pressed again while a turn was being cancelled: leave the chat."""


class StreamLost(RuntimeError):
    """The server stayed unreachable for longer than the reconnect patience."""


class Footer:
    """Shown by ``Live`` under the printed lines: the unfinished streamed line, then the status."""

    def __init__(self, renderer: EventRenderer, status: StatusLine) -> None:
        self.renderer = renderer
        self.status = status

    def __rich__(self) -> RenderableType:
        hint = "Ctrl-C again quits" if self.status.cancel_requested else "Ctrl-C cancels"
        line = Text(f" {hint} │ {self.status.line()} ", style="reverse")
        above = [part for part in (self.renderer.pending, self.renderer.draft) if part.plain]
        footer = Text("\n").join([*above, line])
        footer.no_wrap, footer.overflow = True, "ellipsis"  # a footer that wraps would leave copies behind
        return footer


class CancelOnInterrupt:
    """SIGINT handler for the time a turn streams: cancel first, quit on the second press."""

    def __init__(self, client: FleetClient, turn_id: str, status: StatusLine) -> None:
        self.client = client
        self.turn_id = turn_id
        self.status = status
        self.presses = 0

    def __call__(self, _signum: int, _frame: FrameType | None) -> None:
        self.presses += 1
        if self.presses > 1:
            raise QuitRequested
        self.status.cancel_requested = True
        threading.Thread(target=self._cancel, daemon=True).start()

    def _cancel(self) -> None:
        # A connection of its own: the streaming one is busy in the main thread.
        try:
            with FleetClient(self.client.base_url, token=self.client.token) as canceller:
                canceller.cancel(self.turn_id)
        except ApiFailure as exc:
            if exc.status != 409:  # 409: the turn ended meanwhile
                self.status.cancel_error = exc.message
        except httpx.TransportError:
            self.status.cancel_error = "server unreachable"


class LostFor:
    """A tenacity stop: give up once the stream has been lost for ``seconds`` (counted from the
    first failed attempt, so a long quiet stream before the loss does not count)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._since = 0.0

    def __call__(self, state: RetryCallState) -> bool:
        now = state.outcome_timestamp or time.monotonic()
        if state.attempt_number == 1:
            self._since = now
        return now - self._since > self.seconds


def _worth_retrying(exc: BaseException) -> bool:
    """A dropped connection, a stream that ended early, or the server's own failure (5xx)."""
    if isinstance(exc, httpx.TransportError | StreamEnded):
        return True
    return isinstance(exc, ApiFailure) and exc.status >= 500


def resilient_events(client: FleetClient, turn_id: str, status: StatusLine, after: int = 0) -> Iterator[Event]:
    """Every event after ``after`` to the terminal one, reconnecting from the last seq seen."""
    return _noting_reconnects(
        lambda policy: client.follow(turn_id, after=after, retrying=policy), turn_id, status, after
    )


def resilient_stream(turn: StreamedTurn, status: StatusLine) -> Iterator[Event]:
    """Every event of a streamed submission to the terminal one, reconnecting from the last seq seen."""
    return _noting_reconnects(turn.events, turn.turn_id, status, 0)


def _noting_reconnects(
    events: Callable[[Retrying], Iterator[Event]], turn_id: str, status: StatusLine, after: int
) -> Iterator[Event]:
    """The events ``events`` gives under a policy that keeps reconnecting for :data:`RECONNECT_PATIENCE`,
    each attempt noted on the status line."""
    last = after

    def note_attempt(state: RetryCallState) -> None:
        status.note = f"reconnecting (attempt {state.attempt_number}, from event {last})"

    def give_up(state: RetryCallState) -> NoReturn:
        lost = state.outcome.exception() if state.outcome is not None else None
        raise StreamLost(f"lost the event stream of {turn_id} for {RECONNECT_PATIENCE:.0f}s") from lost

    policy = Retrying(
        stop=LostFor(RECONNECT_PATIENCE),
        wait=RECONNECT_WAIT,
        retry=retry_if_exception(_worth_retrying),
        before_sleep=note_attempt,
        retry_error_callback=give_up,
    )
    for event in events(policy):
        last, status.note = event.seq, ""
        yield event


def follow_turn(client: FleetClient, console: Console, turn_id: str, after: int = 0) -> Event | None:
    """Render an already submitted turn live to its end; returns its terminal event (None if the
    stream had none)."""
    return _render_live(client, console, turn_id, lambda status: resilient_events(client, turn_id, status, after))


def follow_streamed_turn(client: FleetClient, console: Console, turn: StreamedTurn) -> Event | None:
    """:func:`follow_turn` for a turn submitted with its events streamed in the same response."""
    return _render_live(client, console, turn.turn_id, lambda status: resilient_stream(turn, status))


def _render_live(
    client: FleetClient, console: Console, turn_id: str, events: Callable[[StatusLine], Iterator[Event]]
) -> Event | None:
    renderer = EventRenderer(console, line_buffered=True)
    status = StatusLine()
    interrupt = CancelOnInterrupt(client, turn_id, status)
    previous = signal.signal(signal.SIGINT, interrupt)
    terminal: Event | None = None
    try:
        with Live(Footer(renderer, status), console=console, transient=True, refresh_per_second=4) as live:
            for event in events(status):
                status.observe(event)
                renderer.render(event)
                live.refresh()
                if event.terminal:
                    terminal = event
    finally:
        signal.signal(signal.SIGINT, previous)
        renderer.flush()
    return terminal
