"""The live events of the turns this process runs, fanned out to any number of followers.

A channel keeps every event of its turn in memory from the first one, so a follower that joins
late (or reconnects with ``Last-Event-ID``) replays from memory without a gap, then follows live.
Events are published only once stored (see :mod:`fleet_rlm.service.turns.journal`), and the terminal
event only once the turn's final state is committed: a client that sees ``turn.completed`` can
immediately fetch the answer and the artifacts. Everything here runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fleet_rlm.protocol.events import Event, EventSink

FOLLOW_BATCH = 500
"""The most events a follower is handed at once (a late follower replays a long turn in these)."""


class TurnChannel:
    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self.events: list[Event] = []
        self.closed = False
        self._changed = asyncio.Event()
        self._observers: list[EventSink] = []

    def subscribe(self, observer: EventSink) -> None:
        """Call ``observer`` with each event as it is published (synchronously; it must not block)."""
        self._observers.append(observer)

    def publish(self, event: Event) -> None:
        if self.closed:
            return
        self.events.append(event)
        for observer in self._observers:
            observer(event)
        if event.terminal:
            self.closed = True
        self._wake()

    def close(self) -> None:
        """End the stream (for followers) without a terminal event, e.g. when the turn vanished."""
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def follow(self, after_seq: int = 0) -> AsyncIterator[list[Event]]:
        """Events with ``seq > after_seq``, replayed then live, ending after the terminal event; in
        batches of what was published since the follower last looked (at most ``FOLLOW_BATCH``), so a
        stream can send each batch at once."""
        index = 0
        while True:
            while index < len(self.events):
                chunk = self.events[index : index + FOLLOW_BATCH]
                index += len(chunk)
                batch = [event for event in chunk if event.seq > after_seq]
                if batch:
                    yield batch
            if self.closed:
                return
            await self._changed.wait()


class ChannelRegistry:
    """The channels of the turns that are live in this process, by turn id."""

    def __init__(self) -> None:
        self._channels: dict[str, TurnChannel] = {}

    def open(self, turn_id: str) -> TurnChannel:
        channel = self._channels.get(turn_id)
        if channel is None:
            channel = self._channels[turn_id] = TurnChannel(turn_id)
        return channel

    def get(self, turn_id: str) -> TurnChannel | None:
        return self._channels.get(turn_id)

    def discard(self, turn_id: str) -> None:
        channel = self._channels.pop(turn_id, None)
        if channel is not None and not channel.closed:
            channel.close()

    def __len__(self) -> int:
        return len(self._channels)
