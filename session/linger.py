"""Pipelined commits waiting for a barrier to ride with, across one trio run.

A session writer appends a pipelined commit with the next commit that must be
durable; if none comes within ``LINGER`` it flushes the commit on its own.
Rather than each writer keeping a timer for that, every writer of the run
registers here and one system task wakes each when its time is up.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol

import trio

__all__ = ["LINGER", "Flusher", "Lingering"]


class Flusher(Protocol):
    """What lingers here: a session writer (``session.writer.Writer``)."""

    def lingered(self, taken: int) -> None: ...


LINGER = 0.002
"""Seconds pipelined records wait for a barrier to ride with before the writer
appends them on their own: long enough for a step's next durable commit to
come along (a zero-latency model's step takes well under a millisecond), short
beside a real model call, so they reach the journal, and subscribers, soon."""


class Lingering:
    """Every session writer's pipelined commits waiting out ``LINGER`` in one
    trio run, in the order they began to wait (so by deadline: ``LINGER`` is
    one constant).  One system task sleeps until the first is due and hands
    each due writer its flush; a barrier that took the commits first makes
    that a no-op.  So a pipelined commit costs an entry here instead of a
    timer, a cancel scope and two task steps of its session's writer task,
    and a thousand sessions share one wake-up per ``LINGER``.  A barrier that
    takes the newest entry's commits removes it (``taken``), so a lone busy
    session's steps, each taking the last step's commits, wake the task for
    nothing (before: once a step, inside the next step or its durable wait)."""

    __slots__ = ("_due", "_sleep")

    def __init__(self) -> None:
        self._due: deque[tuple[float, Flusher, int]] = deque()
        self._sleep: trio.CancelScope | None = None
        """The scope the task sleeps in until the first entry is due (its
        deadline infinite while none is): moved, never the task woken, as
        entries come and go."""

    @staticmethod
    def of_this_run() -> Lingering:
        try:
            return _LINGERING.get()
        except LookupError:
            lingering = Lingering()
            _LINGERING.set(lingering)
            trio.lowlevel.spawn_system_task(lingering._run, name="session writers' linger")
        return lingering

    def add(self, writer: Flusher, taken: int) -> None:
        """Flush ``writer``'s pipelined commits in ``LINGER`` seconds unless the
        append numbered ``taken`` (its next) has taken them by then."""
        deadline = trio.current_time() + LINGER
        self._due.append((deadline, writer, taken))
        if self._sleep is not None and self._sleep.deadline == math.inf:
            self._sleep.deadline = deadline  # it slept with nothing due

    def taken(self, writer: Flusher, taken: int) -> None:
        """``writer``'s append numbered ``taken`` took its pipelined commits:
        their entry needs no flush.  Removed when it is the newest (a lone
        session's, or the last to wait), else left to pass as a no-op;
        with nothing left due, the task sleeps on without waking."""
        due = self._due
        if due and due[-1][1] is writer and due[-1][2] == taken:
            due.pop()
            if not due and self._sleep is not None:
                self._sleep.deadline = math.inf

    async def _run(self) -> None:
        # A system task: it must never raise (that would crash the run), so
        # what a writer does with its flush is the writer's to contain.
        # Cancelled only when the run ends: that Cancelled is not this
        # scope's, so it ends the task.
        due = self._due
        while True:
            with trio.CancelScope(deadline=due[0][0] if due else math.inf) as self._sleep:
                await trio.sleep_forever()
            self._sleep = None
            self._flush_due(trio.current_time())

    def _flush_due(self, now: float) -> None:
        # Apart from ``_run`` so that no writer stays referenced from its
        # frame while it sleeps: a closed session is freed once its last
        # linger has passed, not when some other session's comes along.
        due = self._due
        while due and due[0][0] <= now:
            _, writer, taken = due.popleft()
            writer.lingered(taken)


_LINGERING: trio.lowlevel.RunVar[Lingering] = trio.lowlevel.RunVar("session_writers_lingering")
