"""Blocking access to a PostgreSQL journal (``journal.blocking``), for clients outside trio.

Rules: every method blocks its caller and is safe to call from any thread:
each call borrows one autocommit connection from a small pool (one thread at
a time) and runs the statements the trio journal's pool runs (``leases.py``,
``reading.py``).  A call whose connection is lost runs again as the trio
pool's do (``retrying.py``): each is safe to repeat (a put finds its key's
entry the second time).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import psycopg

from ..codec import chained_records
from ..errors import JournalClosedError, SessionNotFoundError
from ..inbox import MAX_ENTRY_BYTES, InboxCommand, InboxEntry, encode_command
from ..record import Record
from ..store import HostInfo, SessionInfo
from . import leases
from .reading import first_page, list_sessions
from .retrying import Attempts
from .schema import check_pg_text, connect, describe, discard, lost, open_prepared

__all__ = ["PostgresBlocking"]

_T = TypeVar("_T")

_IDLE_KEPT = 4
"""Idle connections kept for the next call; more threads at once open more."""


class PostgresBlocking:
    """A PostgreSQL journal opened for blocking calls (``open_blocking("postgresql://...")``).

    Opening creates the tables when absent, as ``open_journal`` does.
    """

    def __init__(self, url: str, max_entry_bytes: int | None = None) -> None:
        """``url``: the conninfo; ``max_entry_bytes``: the URL's option, if any."""
        self.url = url
        self.max_entry_bytes = max_entry_bytes or MAX_ENTRY_BYTES
        self._where = describe(url)
        conn, _ = open_prepared(url, self._where)
        self._idle: list[psycopg.Connection[Any]] = [conn]
        self._lock = threading.Lock()
        self._closed = False

    def put(
        self, session: str, key: str, command: InboxCommand, *, definition: str | None = None
    ) -> InboxEntry:
        check_pg_text("session id", session)
        check_pg_text("key", key)
        check_pg_text("definition", definition)
        body = encode_command(command, session, self.max_entry_bytes)
        work = partial(leases.put, session=session, key=key, body=body, definition=definition)
        row = self._run(f"putting a command in the inbox of {session}", work)
        return leases.entry_of(session, row)

    def entry(self, session: str, key: str) -> InboxEntry | None:
        check_pg_text("session id", session)
        check_pg_text("key", key)
        work = partial(leases.entry, session=session, key=key)
        return self._run(f"reading the inbox of session {session}", work)

    def read(self, session: str, *, after: int = 0, limit: int = 512) -> list[Record]:
        """Up to ``limit`` records after ``after`` (and at most a page, 5000)."""
        check_pg_text("session id", session)
        after = max(after, 0)
        first = self._run(
            f"reading session {session}", partial(first_page, session=session, after=after)
        )
        if first is None:
            raise SessionNotFoundError(session)
        previous, whole_from, rows = first
        if after and not rows:
            return []
        return chained_records(
            session, rows[:limit], after=after, previous=bytes(previous), whole_from=whole_from
        )

    def sessions(self) -> list[SessionInfo]:
        return self._run("listing sessions", list_sessions)

    def hosts(self) -> list[HostInfo]:
        return self._run("listing hosts", leases.hosts)

    def close(self) -> None:
        """Close the idle connections (a busy one closes when it is handed back).  Idempotent."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            discard(conn)

    def _run(self, doing: str, fn: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        attempts = Attempts(self._where, doing)
        while True:
            with self._lock:
                if self._closed:
                    raise JournalClosedError(f"journal {self._where} is closed")
                conn = self._idle.pop() if self._idle else None
            try:
                if conn is None:
                    conn = connect(self.url)
                result = fn(conn)
            except psycopg.Error as exc:
                broken = lost(conn)
                if broken:
                    discard(conn)
                else:
                    self._return(conn)
                pause = attempts.failed(exc, broken=broken)
                if pause:
                    time.sleep(pause)
                continue
            except BaseException:
                self._return(conn)
                raise
            self._return(conn)
            return result

    def _return(self, conn: psycopg.Connection[Any] | None) -> None:
        if conn is None:
            return
        with self._lock:
            keep = not self._closed and not conn.closed and len(self._idle) < _IDLE_KEPT
            if keep:
                self._idle.append(conn)
        if not keep:
            discard(conn)
