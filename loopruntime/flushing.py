"""Streamed pieces waiting to be flushed, across one trio run.

A model call's streamed pieces reach the journal within ``FLUSH_INTERVAL``
even when the stream stalls (``turn.py``).  Rather than each loop keeping a
task that sleeps until its deadline, every loop of the run registers the
deadline here and one system task hands each due loop its flush; a stream
that reaches a block's end, or its own end, first cancels it, so the common
case costs an entry here and no task at all.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Protocol

import trio

__all__ = ["FlushClock", "Flushable", "Ticket"]


class Flushable(Protocol):
    """What waits here: a loop (``Loop``), with a flush due."""

    def flush_due(self, ticket: Ticket) -> None: ...


class Ticket:
    """One flush deadline's entry.  ``cancel`` drops its loop, so a cancelled
    entry keeps no loop alive while it waits out its deadline here."""

    __slots__ = ("clock", "loop")

    def __init__(self, clock: FlushClock, loop: Flushable) -> None:
        self.clock = clock
        self.loop: Flushable | None = loop

    def cancel(self) -> None:
        if self.loop is not None:
            self.loop = None
            self.clock._dropped()


class FlushClock:
    """Every loop's flush deadline in one trio run, earliest first.  One system
    task sleeps until the first is due, then calls each due loop's
    ``flush_due``; an entry cancelled meanwhile (``Ticket.cancel``) is
    dropped, its loop no longer referenced.  Once every entry is cancelled
    the task's deadline goes with them: a lone loop's model calls, each
    cancelling its entry when its stream ends, never wake it (in a turn
    longer than ``FLUSH_INTERVAL`` they did once a call)."""

    __slots__ = ("_due", "_live", "_order", "_sleep")

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Ticket]] = []
        self._order = itertools.count()
        """Ties on a deadline are taken in the order they came (loops never compare)."""
        self._sleep: trio.CancelScope | None = None
        """The scope the task sleeps in, its deadline the first entry's."""
        self._live = 0
        """Entries neither cancelled nor due yet."""

    @staticmethod
    def of_this_run() -> FlushClock:
        try:
            return _CLOCK.get()
        except LookupError:
            clock = FlushClock()
            _CLOCK.set(clock)
            trio.lowlevel.spawn_system_task(clock._run, name="loops' stream flushes")
        return clock

    def add(self, deadline: float, loop: Flushable) -> Ticket:
        """Call ``loop.flush_due(ticket)`` once ``deadline`` (trio time) has
        come, unless the returned ticket is cancelled first."""
        ticket = Ticket(self, loop)
        heapq.heappush(self._due, (deadline, next(self._order), ticket))
        self._live += 1
        sleep = self._sleep
        if sleep is not None and deadline < sleep.deadline:
            sleep.deadline = deadline
        return ticket

    async def _run(self) -> None:
        # A system task: it must never raise (that would crash the run), so
        # what a loop does with its flush is the loop's to contain.
        while True:
            first = self._due[0][0] if self._due else math.inf
            with trio.CancelScope(deadline=first) as self._sleep:
                await trio.sleep_forever()
            self._sleep = None
            self._flush_due(trio.current_time())

    def _flush_due(self, now: float) -> None:
        # Apart from ``_run`` so that no loop stays referenced from its frame
        # while it sleeps.
        due = self._due
        while due and due[0][0] <= now:
            ticket = heapq.heappop(due)[2]
            loop = ticket.loop
            if loop is not None:
                ticket.loop = None
                self._live -= 1
                loop.flush_due(ticket)
        if self._live == 0:
            due.clear()  # cancelled entries only: none needs its deadline

    def _dropped(self) -> None:
        """A ticket was cancelled: with none left, forget every entry."""
        self._live -= 1
        if self._live == 0:
            self._due.clear()
            if self._sleep is not None:
                self._sleep.deadline = math.inf


_CLOCK: trio.lowlevel.RunVar[FlushClock] = trio.lowlevel.RunVar("loops_flush_clock")
