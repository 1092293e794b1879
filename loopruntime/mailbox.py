"""The actor's mailbox: a bounded command lane and an unbounded priority lane.

Priority items are always received first.  Every item put calls ``arrived``
(the loop starts its actor there when it is parked).  Closing refuses new
items with ``LoopClosedError`` and hands back those still waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from .empties import NO_LIST
from .errors import LoopClosedError

__all__ = ["Mailbox"]


"""The empty lane every idle mailbox shares; never written (a sender gives the
lane a list of its own first)."""


def _nothing() -> None:
    pass


class Mailbox:
    """A bounded command lane plus an unbounded priority lane.

    Plain lists, not deques: a mailbox almost always holds zero or one
    command, and an idle loop should cost as little memory as possible (an
    empty deque is ten times the size of an empty list).  The lot a sender
    waits in for room is made only when the command lane is full."""

    __slots__ = (
        "_arrived",
        "_capacity",
        "_normal",
        "_priority",
        "_readable",
        "_writable",
        "closed",
    )

    def __init__(self, capacity: int, arrived: Callable[[], None] = _nothing) -> None:
        self._capacity = capacity
        self._arrived = arrived
        self._normal: list[Any] = NO_LIST
        self._priority: list[Any] = NO_LIST
        self._readable: trio.lowlevel.ParkingLot | None = None
        self._writable: trio.lowlevel.ParkingLot | None = None
        self.closed = False

    def __len__(self) -> int:
        return len(self._normal) + len(self._priority)

    async def send(self, item: Any) -> None:
        """Put ``item`` in the command lane, waiting while it is full.  Not a
        checkpoint when there is room: the caller (``Loop.send``) waits on the
        command's reply next, which is one, and a second would cost every
        command a task step of its sender for nothing."""
        while len(self._normal) >= self._capacity and not self.closed:
            if self._writable is None:
                self._writable = trio.lowlevel.ParkingLot()
            await self._writable.park()
        if self.closed:
            raise LoopClosedError("the loop is shut down; it takes no more commands")
        if self._normal is NO_LIST:
            self._normal = []
        self._normal.append(item)
        self.poke()
        self._arrived()

    def send_priority(self, item: Any) -> None:
        if self.closed:
            raise LoopClosedError("the loop is shut down; it takes no more commands")
        if self._priority is NO_LIST:
            self._priority = []
        self._priority.append(item)
        self.poke()
        self._arrived()

    def take(self) -> Any:
        """The next item, or None when there is none (items are never None)."""
        if self._priority:
            return self._priority.pop(0)
        if not self._normal:
            return None
        item = self._normal.pop(0)
        if self._writable is not None:
            self._writable.unpark()
        return item

    async def wait(self) -> None:
        """Wait until an item arrives or ``poke`` is called (check again then)."""
        if self._readable is None:
            self._readable = trio.lowlevel.ParkingLot()
        await self._readable.park()

    def poke(self) -> None:
        """Wake the reader waiting in ``wait`` without an item."""
        if self._readable is not None:
            self._readable.unpark()

    def release(self) -> None:
        """The reader is gone (a parked actor): drop the lot it waited in, and
        the empty lanes' lists."""
        if self._readable is not None and not self._readable:
            self._readable = None
        if not self._normal:
            self._normal = NO_LIST
        if not self._priority:
            self._priority = NO_LIST

    async def receive(self) -> Any:
        while (item := self.take()) is None:
            await self.wait()
        return item

    def close(self) -> list[Any]:
        """Refuse new items; return those still waiting."""
        self.closed = True
        if self._writable is not None:
            self._writable.unpark_all()
        left = [*self._priority, *self._normal]
        self._priority = self._normal = NO_LIST
        return left
