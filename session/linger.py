"""Pipelined commits waiting for a barrier to ride with, across one trio run.

A session writer appends a pipelined commit with the next commit that must be
durable; if none comes within ``LINGER`` it flushes the commit on its own.
Rather than each writer keeping a timer for that, every writer of the run
registers here and one system task wakes each when its time is up.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

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
    and a thousand sessions share one wake-up per ``LINGER``."""

    __slots__ = ("_due", "_parked")

    def __init__(self) -> None:
        self._due: deque[tuple[float, Flusher, int]] = deque()
        self._parked: trio.lowlevel.Task | None = None

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
        self._due.append((trio.current_time() + LINGER, writer, taken))
        if self._parked is not None:
            task, self._parked = self._parked, None
            trio.lowlevel.reschedule(task)

    async def _run(self) -> None:
        # A system task: it must never raise (that would crash the run), so
        # what a writer does with its flush is the writer's to contain.
        due = self._due
        while True:
            if not due:
                self._parked = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(self._abort)
                continue
            await trio.sleep_until(due[0][0])
            self._flush_due(trio.current_time())

    def _flush_due(self, now: float) -> None:
        # Apart from ``_run`` so that no writer stays referenced from its
        # frame while it parks: a closed session is freed once its last
        # linger has passed, not when some other session's comes along.
        due = self._due
        while due and due[0][0] <= now:
            _, writer, taken = due.popleft()
            writer.lingered(taken)

    def _abort(self, _: Any) -> trio.lowlevel.Abort:
        self._parked = None  # cancelled: the run is ending
        return trio.lowlevel.Abort.SUCCEEDED


_LINGERING: trio.lowlevel.RunVar[Lingering] = trio.lowlevel.RunVar("session_writers_lingering")
