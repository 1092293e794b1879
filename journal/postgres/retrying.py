"""The one PostgreSQL retry rule, shared by the trio journal's pool
(``reading.Pool``) and the blocking access (``blocking.PostgresBlocking``).

Rule: a statement the server refused is never run again (it would be
refused again): it is a ``JournalError``.  A call whose connection was lost
(never made, or broken) runs again on a new connection, at once, once: the
work of these pools is safe to repeat (reads, and puts that find their
key's entry the second time); when that fails too, it is a
``JournalUnavailableError``, which a reader may retry longer under its own
policy (``journal.retry``, ``journal.backoff``).
"""

from __future__ import annotations

import logging

import psycopg
import structlog

from ..backoff import Retrying, RetryPolicy
from .schema import translate

__all__ = ["AGAIN_AT_ONCE", "Attempts"]

log = structlog.wrap_logger(logging.getLogger(__name__))

AGAIN_AT_ONCE = RetryPolicy(attempts=2, first=0.0, cap=0.0)
"""A lost connection: one more attempt, on a new connection, without a pause."""

_ONCE = RetryPolicy(attempts=1, first=0.0, cap=0.0)


class Attempts(Retrying):
    """The attempts of one call of a pool (``doing`` names it in errors)."""

    __slots__ = ("doing", "where")

    def __init__(self, where: str, doing: str, *, retry: bool = True) -> None:
        super().__init__(AGAIN_AT_ONCE if retry else _ONCE)
        self.where, self.doing = where, doing

    def failed(self, exc: psycopg.Error, *, broken: bool) -> float:
        """After an attempt failed with ``exc`` (``broken``: its connection is
        lost, and was thrown away): the pause before the next attempt, or the
        translated error raised when there is none."""
        if not broken:
            raise translate(self.where, self.doing, exc, lost=False) from exc
        pause = self.pause()
        if pause is None:
            raise translate(self.where, self.doing, exc, lost=True) from exc
        log.warning("postgres_retry", where=self.where, doing=self.doing, error=str(exc))
        return pause
