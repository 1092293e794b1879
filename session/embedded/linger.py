"""Pipelined commits waiting for a barrier to ride with, across one trio run.

A session writer appends a pipelined commit with the next commit that must be
durable; if none comes within ``LINGER`` it flushes the commit on its own.
Every writer of the run registers here, on the run's shared timer
(``loopruntime.host.RunTimer.shared``), instead of keeping a timer of its own.
"""

from __future__ import annotations

from typing import Protocol

import trio

from loopruntime.host import RunTimer, Ticket

__all__ = ["LINGER", "Flusher", "Lingering"]


class Flusher(Protocol):
    """What lingers here: a session writer (``session.embedded.writer.Writer``)."""

    def lingered(self, taken: int) -> None: ...


LINGER = 0.002
"""Seconds pipelined records wait for a barrier to ride with before the writer
appends them on their own: long enough for a step's next durable commit to
come along (a zero-latency model's step takes well under a millisecond), short
beside a real model call, so they reach the journal, and subscribers, soon."""


class Lingering:
    """Every session writer's pipelined commits waiting out ``LINGER`` in one
    trio run.  A barrier that took the newest entry's commits cancels it
    (``taken``), so a lone busy session, each step taking the last step's
    commits, never wakes the timer; an older entry passes as a no-op (the
    writer tells by ``taken`` that its commits went)."""

    __slots__ = ("_newest", "_timer")

    def __init__(self, timer: RunTimer) -> None:
        self._timer = timer
        self._newest: tuple[Flusher, int, Ticket] | None = None

    @staticmethod
    def of_this_run() -> Lingering:
        try:
            return _LINGERING.get()
        except LookupError:
            lingering = Lingering(RunTimer.shared())
            _LINGERING.set(lingering)
        return lingering

    def add(self, writer: Flusher, taken: int) -> None:
        """Flush ``writer``'s pipelined commits in ``LINGER`` seconds unless the
        append numbered ``taken`` (its next) has taken them by then."""
        deadline = trio.current_time() + LINGER
        ticket = self._timer.add(deadline, lambda: self._lingered(writer, taken))
        self._newest = (writer, taken, ticket)

    def taken(self, writer: Flusher, taken: int) -> None:
        """``writer``'s append numbered ``taken`` took its pipelined commits:
        their entry needs no flush (cancelled when it is the newest)."""
        newest = self._newest
        if newest is not None and newest[0] is writer and newest[1] == taken:
            self._newest = None
            newest[2].cancel()

    def _lingered(self, writer: Flusher, taken: int) -> None:
        newest = self._newest
        if newest is not None and newest[0] is writer and newest[1] == taken:
            # Forgotten once due: a closed session is freed after its last linger.
            self._newest = None
        writer.lingered(taken)


_LINGERING: trio.lowlevel.RunVar[Lingering] = trio.lowlevel.RunVar("session_writers_lingering")
