"""A host's view of its journal being out of reach: one outage at a time.

Rules (docs/host.md, "When the journal is out of reach"):

* any call of the host's that fails with ``JournalUnavailableError`` (the
  server restarting, a SQLite file locked past its busy timeout) begins an
  outage, or joins the one under way; it is logged once when it begins and
  once when it ends, with its length;
* only a whole renewal round (the registration and the leases) ends it: the
  renewals are the host's probe, retried meanwhile after a capped exponential
  backoff with full jitter rather than on the round's schedule;
* while it lasts the host is not ``ready``: it claims nothing new, keeps the
  sessions it holds, and their work waits for the journal where it needs it.
"""

from __future__ import annotations

import random

import trio
from structlog.typing import FilteringBoundLogger

__all__ = ["RETRY_CAP", "RETRY_FIRST", "Outage"]

RETRY_FIRST = 0.1
"""Seconds before the first retry in an outage; each next one doubles it."""

RETRY_CAP = 5.0
"""The longest wait between two retries in an outage, in seconds."""


class Outage:
    """Whether the journal is out of reach, since when, and when to try again."""

    def __init__(self, log: FilteringBoundLogger, *, rng: random.Random | None = None) -> None:
        self._log = log
        self._rng = rng or random.Random()
        self.began: float | None = None
        """When the outage under way began (trio time); None while reachable."""
        self.count = 0
        """Outages since the host opened."""
        self._attempts = 0
        self.retry_at = 0.0
        """When the next probe is due (trio time), while down."""
        self._over = trio.Event()
        self._changed = trio.Event()

    @property
    def down(self) -> bool:
        return self.began is not None

    def failed(self, doing: str, error: Exception) -> None:
        """A call failed for want of the journal: begin an outage (logged), or
        count one more failed try of the one under way (not logged)."""
        now = trio.current_time()
        if self.began is None:
            self.began = now
            self.count += 1
            self._attempts = 0
            self._over = trio.Event()
            self._log.warning("journal_unreachable", doing=doing, error=str(error))
        # Full jitter: hosts that lost the journal together do not return together.
        ceiling = min(RETRY_CAP, RETRY_FIRST * 2**self._attempts)
        self._attempts += 1
        self.retry_at = now + self._rng.uniform(0.0, ceiling)
        self._changed.set()
        self._changed = trio.Event()

    def reached(self) -> None:
        """A whole renewal round went through: the outage under way (if any) ends."""
        if self.began is None:
            return
        lasted = trio.current_time() - self.began
        self.began = None
        self._log.warning("journal_reachable_again", outage_seconds=round(lasted, 3))
        self._over.set()

    async def wait_over(self) -> None:
        """Return once no outage is under way."""
        while self.began is not None:
            await self._over.wait()

    async def sleep_until(self, when: float) -> None:
        """Sleep until ``when`` (trio time), or until the next retry is due if
        an outage is under way and its retry comes sooner."""
        while True:
            wake = min(when, self.retry_at) if self.began is not None else when
            if trio.current_time() >= wake:
                return
            changed = self._changed
            with trio.move_on_at(wake):
                await changed.wait()
