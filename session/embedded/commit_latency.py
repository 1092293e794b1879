"""How long the session writers' durable commits take: one histogram per process.

Rules:

* every ``Journal.append`` a session writer makes is one durable commit that
  the writer and every commit in it wait on; each is timed on the monotonic
  clock from the call to its return and counted in ``COMMIT_BUCKETS``, only
  once it returned (a failed append made nothing durable);
* the cost is two clock reads, a bisect and two additions per append, next to
  an append's milliseconds; no lock: a trio run steps one task at a time, and
  trio runs in several threads of one process share the counts (the GIL
  keeps each addition whole in practice; metrics tolerate the rare race);
* ``commit_latency()`` is the read side (the host's metrics,
  ``loopruntime_commit_seconds``): a frozen snapshot, counted since the
  process began.
"""

from __future__ import annotations

import math
from bisect import bisect_left

import msgspec

__all__ = ["COMMIT_BUCKETS", "CommitLatency", "commit_latency", "observe_commit"]

COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Upper bounds (seconds) of the buckets: a local SQLite commit takes about a
millisecond, one to a PostgreSQL server a few; the top ones catch a journal in
trouble."""


class CommitLatency(msgspec.Struct, frozen=True, kw_only=True):
    """The durable commits of this process's session writers so far."""

    bounds: tuple[float, ...]
    """``COMMIT_BUCKETS``, then ``inf``."""
    counts: tuple[int, ...]
    """Commits per bucket (not cumulative): ``counts[i]`` took at most
    ``bounds[i]`` and more than the bound before."""
    count: int
    seconds: float
    """Their total time."""

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, commits that took at most that), ``inf`` last: the
        shape of a Prometheus histogram's buckets."""
        out, running = [], 0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


class _Counts:
    def __init__(self) -> None:
        self.buckets = [0] * (len(COMMIT_BUCKETS) + 1)
        self.seconds = 0.0


_COUNTS = _Counts()


def observe_commit(seconds: float) -> None:
    """Count one durable commit that took ``seconds``."""
    _COUNTS.buckets[bisect_left(COMMIT_BUCKETS, seconds)] += 1
    _COUNTS.seconds += seconds


def commit_latency() -> CommitLatency:
    """A snapshot of the commits counted since the process began."""
    counts = tuple(_COUNTS.buckets)
    return CommitLatency(
        bounds=(*COMMIT_BUCKETS, math.inf),
        counts=counts,
        count=sum(counts),
        seconds=_COUNTS.seconds,
    )
