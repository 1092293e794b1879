"""The loop's busy count while a batch's calls run in parallel.

The loop is quiet (``wait_idle`` returns) only when nothing counts itself
busy.  Each running call counts itself; a task that only waits on calls does
not, so parallel calls that each wait on a person leave the loop quiet.
"""

from __future__ import annotations

import trio

from .ports import ToolsPort

__all__ = ["ALL", "ANY", "ParallelCalls", "Waiter"]

ANY = object()
"""The turn waits for any parallel call to end (a free slot)."""
ALL = object()
"""The turn waits for every parallel call to end."""


class Waiter:
    """A task's part in the loop's busy count while it waits on parallel calls."""

    def __init__(self, loop: ToolsPort) -> None:
        self.loop = loop
        self.on: object = None
        """What it waits for: a call's ``done`` event, ``ANY`` or ``ALL``
        (None: it is not waiting)."""

    def begin(self, on: object) -> None:
        self.on = on
        self.loop.busy(-1)

    def end(self) -> None:
        """It counts itself again (idempotent)."""
        if self.on is not None:
            self.on = None
            self.loop.busy(+1)


class ParallelCalls:
    """The parallel calls of a batch and who waits on them.

    Each call counts itself busy; a task that only waits on calls (the turn,
    or a call queued behind another on the same target) does not, so when
    each running call waits on a person (a question) the loop is quiet, as
    with one exclusive call asking.  The call whose end lets a waiter go on
    gives it its count back before it stops counting itself: the loop never
    looks quiet between a call ending and its waiter going on.
    """

    def __init__(self, loop: ToolsPort) -> None:
        self.loop = loop
        self.turn = Waiter(loop)
        self.live = 0
        """Calls started and not ended."""
        self.followers: dict[trio.Event, Waiter] = {}
        """The call queued behind each call on its target."""

    def started(self, done: trio.Event, before: trio.Event | None) -> Waiter | None:
        """A call is started (its task may not run yet): counted busy from now,
        since the turn may stop counting itself before then; returns the
        waiter of a call queued behind ``before``."""
        self.loop.busy(+1)
        self.live += 1
        if before is None:
            return None
        follower = self.followers[before] = Waiter(self.loop)
        return follower

    def ended(self, done: trio.Event) -> None:
        """A call ended (``done`` is set): give back the count of whoever it lets
        go on, then stop counting it."""
        self.live -= 1
        follower = self.followers.pop(done, None)
        if follower is not None:
            follower.end()
        on = self.turn.on
        if on is ANY or on is done or (on is ALL and not self.live):
            self.turn.end()
        self.loop.busy(-1)
