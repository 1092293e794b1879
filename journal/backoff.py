"""The retry policy of calls to a journal that may be briefly unreachable:
capped exponential backoff with full jitter, and a bound on the pauses.

Pure but for the clock that ``Retrying`` reads to say how long a call was
tried.  Used by the readers that ride out an outage (``journal.retry``) and
by the PostgreSQL pools' retry rule (``postgres/retrying.py``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator

import msgspec

from .errors import JournalUnavailableError

__all__ = ["READ_RETRIES", "RetryPolicy", "Retrying"]


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Capped exponential backoff with full jitter.

    Attempt ``n`` (from 1) that fails is followed by a pause drawn uniformly
    below ``min(cap, first * 2 ** (n - 1))``, until ``attempts`` were made."""

    attempts: int
    """Attempts in all, the first included (1: never retry)."""
    first: float
    """Ceiling of the first pause, in seconds."""
    cap: float
    """Ceiling of every pause, in seconds."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"a retry policy makes at least 1 attempt, not {self.attempts}")
        if not 0 <= self.first <= self.cap:
            raise ValueError(
                f"a retry policy's pauses must satisfy 0 <= first ({self.first}) <= cap "
                f"({self.cap})"
            )

    @property
    def bound(self) -> float:
        """The longest the pauses of one call add up to, in seconds."""
        return sum(min(self.cap, self.first * 2**n) for n in range(self.attempts - 1))

    def pauses(self, draw: Callable[[], float] = random.random) -> Iterator[float]:
        """The pause after each failed attempt but the last (``draw`` in [0, 1))."""
        for n in range(self.attempts - 1):
            yield draw() * min(self.cap, self.first * 2**n)


READ_RETRIES = RetryPolicy(attempts=8, first=0.05, cap=2.0)
"""How clients and the console retry a read of an unreachable journal: 8
attempts, pauses of at most 0.05, 0.1, ... 1.6, 2 s (5.15 s in all, the
``bound``), enough for a PostgreSQL restart (docs/boundaries.md)."""


class Retrying:
    """One call's attempts under a policy: after each failure, ``pause`` is
    the wait before the next attempt, or None when none is left.  ``clock``
    (seconds) is the one the pauses are slept on."""

    __slots__ = ("_pauses", "clock", "policy", "started", "tries")

    def __init__(self, policy: RetryPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy, self.clock = policy, clock
        self._pauses = policy.pauses()
        self.started = clock()
        self.tries = 1

    def pause(self) -> float | None:
        pause = next(self._pauses, None)
        if pause is not None:
            self.tries += 1
        return pause

    def exhausted(self, exc: JournalUnavailableError) -> JournalUnavailableError:
        """The error to raise once no attempt is left: ``exc``, saying how long it was tried."""
        waited = self.clock() - self.started
        again = JournalUnavailableError(
            f"{exc} (tried {self.tries} times over {waited:.1f} s; the bound of the "
            f"retries is {self.policy.bound:g} s of pauses)"
        )
        again.__cause__ = exc
        return again
