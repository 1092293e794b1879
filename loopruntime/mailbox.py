"""The actor's mailbox: a bounded command lane and an unbounded priority lane.

Priority items are always received first.  Closing refuses new items with
``LoopClosedError`` and hands back those still waiting.
"""

from __future__ import annotations

from typing import Any

import trio

from .errors import LoopClosedError

__all__ = ["Mailbox"]


class Mailbox:
    """A bounded command lane plus an unbounded priority lane.

    Plain lists, not deques: a mailbox almost always holds zero or one
    command, and an idle loop should cost as little memory as possible (an
    empty deque is ten times the size of an empty list).  The lot a sender
    waits in for room is made only when the command lane is full."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._normal: list[Any] = []
        self._priority: list[Any] = []
        self._readable = trio.lowlevel.ParkingLot()
        self._writable: trio.lowlevel.ParkingLot | None = None
        self.closed = False

    def __len__(self) -> int:
        return len(self._normal) + len(self._priority)

    async def send(self, item: Any) -> None:
        while len(self._normal) >= self._capacity and not self.closed:
            if self._writable is None:
                self._writable = trio.lowlevel.ParkingLot()
            await self._writable.park()
        if self.closed:
            raise LoopClosedError("the loop is shut down; it takes no more commands")
        self._normal.append(item)
        self._readable.unpark()
        await trio.lowlevel.checkpoint()

    def send_priority(self, item: Any) -> None:
        if self.closed:
            raise LoopClosedError("the loop is shut down; it takes no more commands")
        self._priority.append(item)
        self._readable.unpark()

    async def receive(self) -> Any:
        while not self._priority and not self._normal:
            await self._readable.park()
        if self._priority:
            return self._priority.pop(0)
        item = self._normal.pop(0)
        if self._writable is not None:
            self._writable.unpark()
        return item

    def close(self) -> list[Any]:
        """Refuse new items; return those still waiting."""
        self.closed = True
        if self._writable is not None:
            self._writable.unpark_all()
        left = [*self._priority, *self._normal]
        self._priority.clear()
        self._normal.clear()
        return left
