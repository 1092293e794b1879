"""Many short deadlines of one trio run, watched by one system task.

Rules:
- ``RunTimer.add`` costs a heap entry and a ``Ticket``, never a task.
- A cancelled ticket drops what it would have called: it keeps nothing alive
  while its entry waits out its deadline.
- With every ticket cancelled the task sleeps with no deadline: it never wakes
  for nothing.
- A due call runs in the system task, which must never raise: what it does is
  the caller's to contain (start a task of its own for real work).

Users: the streamed pieces' flush deadlines of every loop (``actor.py``) and
the session writers' linger (``session/embedded/linger.py``), both on the run's one
shared timer (``shared``): a deadline added behind an earlier live one, as a step's
flush is behind its linger, changes no trio deadline.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable

import trio

__all__ = ["RunTimer", "Ticket"]


class Ticket:
    """One deadline's entry; ``cancel`` forgets what it would call."""

    __slots__ = ("call", "timer")

    def __init__(self, timer: RunTimer, call: Callable[[], None]) -> None:
        self.timer = timer
        self.call: Callable[[], None] | None = call

    def cancel(self) -> None:
        """A no-op once the ticket is cancelled or has come due."""
        if self.call is not None:
            self.call = None
            self.timer._dropped()


class RunTimer:
    """Deadlines in one trio run, earliest first; one system task (``name``)
    sleeps until the first is due, then calls each due ticket's call."""

    __slots__ = ("_due", "_live", "_order", "_sleep")

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Ticket]] = []
        self._order = itertools.count()
        """Ties on a deadline are taken in the order they came."""
        self._sleep: trio.CancelScope | None = None
        """The scope the task sleeps in, its deadline the first entry's."""
        self._live = 0
        """Entries neither cancelled nor due yet."""

    @staticmethod
    def shared() -> RunTimer:
        """The run's one timer of short deadlines, every user's (see the
        module's rules), made with its task on first use."""
        try:
            return _SHARED.get()
        except LookupError:
            timer = RunTimer()
            _SHARED.set(timer)
            trio.lowlevel.spawn_system_task(timer._run, name="run timer")
        return timer

    def add(self, deadline: float, call: Callable[[], None]) -> Ticket:
        """Call ``call()`` once ``deadline`` (trio time) has come, unless the
        returned ticket is cancelled first."""
        ticket = Ticket(self, call)
        heapq.heappush(self._due, (deadline, next(self._order), ticket))
        self._live += 1
        sleep = self._sleep
        if sleep is not None and deadline < sleep.deadline:
            sleep.deadline = deadline
        return ticket

    async def _run(self) -> None:
        # Cancelled only when the run ends: that Cancelled is not this
        # scope's, so it ends the task.
        while True:
            first = self._due[0][0] if self._due else math.inf
            with trio.CancelScope(deadline=first) as self._sleep:
                await trio.sleep_forever()
            self._sleep = None
            self._call_due(trio.current_time())

    def _call_due(self, now: float) -> None:
        # Apart from ``_run`` so that nothing a call references stays
        # referenced from the task's frame while it sleeps.
        due = self._due
        while due and due[0][0] <= now:
            ticket = heapq.heappop(due)[2]
            call = ticket.call
            if call is not None:
                ticket.call = None
                self._live -= 1
                call()
        if self._live == 0:
            due.clear()  # cancelled entries only: none needs its deadline

    def _dropped(self) -> None:
        """A ticket was cancelled: with none left, forget every entry."""
        self._live -= 1
        if self._live == 0:
            self._due.clear()
            if self._sleep is not None:
                self._sleep.deadline = math.inf


_SHARED: trio.lowlevel.RunVar[RunTimer] = trio.lowlevel.RunVar("loopruntime_run_timer")
