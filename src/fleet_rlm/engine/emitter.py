"""The emitter that stamps a turn's events with a growing ``seq`` and hands them to sinks."""

from __future__ import annotations

import itertools
import threading
import time

from fleet_rlm.protocol.events import TERMINAL_TYPES, Event, EventSink, new_id
from fleet_rlm.protocol.payloads import Payload


class EventEmitter:
    """Stamps events with a growing ``seq`` and hands them to sinks; safe to call from any thread.

    After a terminal event nothing more is emitted: late events from abandoned work are dropped,
    so a turn always ends with exactly one terminal event.
    """

    def __init__(self, turn_id: str, *sinks: EventSink, start_seq: int = 0, root_span: str | None = None) -> None:
        self.turn_id = turn_id
        self.root_span = root_span or new_id("span")
        self._sinks = list(sinks)
        self._seq = itertools.count(start_seq + 1)
        self._lock = threading.Lock()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def emit(self, payload: Payload, *, span_id: str | None = None, parent_span_id: str | None = None) -> Event | None:
        """Emit the event ``payload`` is the data of (its class names the type)."""
        with self._lock:
            if self._closed:
                return None
            if payload.event_type in TERMINAL_TYPES:
                self._closed = True
            is_root = span_id is None and parent_span_id is None
            event = Event.carrying(
                payload,
                seq=next(self._seq),
                turn_id=self.turn_id,
                ts=time.time(),
                span_id=span_id or self.root_span,
                parent_span_id=None if is_root else (parent_span_id or self.root_span),
            )
            for sink in self._sinks:
                sink(event)
        return event
