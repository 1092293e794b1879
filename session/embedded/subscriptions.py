"""Subscriptions: a session's records and stream deltas, fanned out to readers.

Each subscriber has a bounded buffer.  A stream delta that does not fit is
dropped (deltas are ephemeral); a durable record never silently goes
missing: a subscriber that falls that far behind ends with
``SessionLagError`` naming the seq to resume from.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import trio

from journal import Journal, Record
from loopruntime.host import Delta

from .errors import SeqOutOfRangeError, SessionLagError

__all__ = ["StreamDelta", "Subscriber", "Subscriptions"]


class StreamDelta(msgspec.Struct, frozen=True, kw_only=True):
    """A live stream delta (ephemeral: not durable, may be dropped)."""

    loop: str
    effect_id: str
    delta: Any


class Subscriber:
    """One reader's bounded buffer; the writer pushes, the reader drains."""

    __slots__ = ("buffer", "capacity", "deltas", "dropped", "lagged", "lot")

    def __init__(self, capacity: int, deltas: bool) -> None:
        self.buffer: deque[Record | StreamDelta] = deque()
        self.capacity = capacity
        self.deltas = deltas
        self.lagged = False
        self.dropped = 0
        self.lot = trio.lowlevel.ParkingLot()

    def push(self, item: Record | StreamDelta) -> None:
        if len(self.buffer) >= self.capacity:
            if isinstance(item, StreamDelta):
                self.dropped += 1  # ephemeral: dropping is allowed
                return
            # A durable record never silently goes missing: the subscription
            # ends with an error saying where to resume from.
            self.lagged = True
            self.lot.unpark_all()
            return
        self.buffer.append(item)
        self.lot.unpark_all()


class Subscriptions:
    """Every subscriber of one session.

    The writer pushes each durable record to ``subscribers`` itself, after it
    folded it; deltas come through ``publish_delta``.  ``head`` and
    ``closed`` read the session's own state when a subscription starts and
    each time it wakes."""

    def __init__(
        self,
        journal: Journal,
        session_id: str,
        *,
        head: Callable[[], int],
        closed: Callable[[], bool],
    ) -> None:
        self.journal = journal
        self.session_id = session_id
        self.subscribers: dict[Subscriber, None] = {}
        """The live subscriptions (a dict as an ordered set: empty, as an idle
        session's is, it is a quarter of an empty set and not tracked by the
        collector)."""
        self._head = head
        self._closed = closed

    def publish_delta(self, loop: str, effect_id: str, delta: Delta) -> None:
        if not self.subscribers:
            return
        item = StreamDelta(loop=loop, effect_id=effect_id, delta=delta)
        for sub in self.subscribers:
            if sub.deltas:
                sub.push(item)

    def wake_all(self) -> None:
        """Let every subscriber see that the session closed."""
        for sub in self.subscribers:
            sub.lot.unpark_all()

    async def subscribe(
        self, after: int | None, *, deltas: bool, capacity: int
    ) -> AsyncIterator[Record | StreamDelta]:
        """History after ``after`` from the journal, then live records (and
        deltas); see ``Session.subscribe``."""
        head = self._head()
        if after is None:
            after = head
        if not 0 <= after <= head:
            raise SeqOutOfRangeError(self.session_id, after, head)
        sub = Subscriber(capacity, deltas)
        self.subscribers[sub] = None
        last = after
        try:
            async for record in self.journal.read(self.session_id, after=after):
                yield record
                last = record.seq
            while True:
                while sub.buffer:
                    item = sub.buffer.popleft()
                    if isinstance(item, Record):
                        if item.seq <= last:
                            continue
                        last = item.seq
                    yield item
                if sub.lagged:
                    raise SessionLagError(self.session_id, last)
                if self._closed():
                    return
                await sub.lot.park()
        finally:
            self.subscribers.pop(sub, None)
