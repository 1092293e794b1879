"""Blocking access to a SQLite journal (``journal.blocking``), for clients outside trio.

Rules: every method blocks its caller and is safe to call from any thread.
A put is one ``BEGIN IMMEDIATE`` transaction on this object's own writer
connection (one thread at a time, under a lock), with the statements and
decisions the journal's writer thread uses (``leases.py``, ``journal.rules``);
SQLite's file lock orders it against every other writer, in this process or
another.  Reads take a connection from a pool of readers and verify the
digest chain (``codec.chained_records``).
"""

from __future__ import annotations

import sqlite3
import threading
import time

from ..codec import GENESIS, chained_records
from ..errors import JournalClosedError, JournalCorruptError, SessionNotFoundError
from ..inbox import MAX_ENTRY_BYTES, InboxCommand, InboxEntry, encode_command
from ..location import JournalLocation
from ..record import Record, check_text
from ..rules import UNOWNED
from ..store import HostInfo, SessionInfo
from .leases import insert_session, list_hosts, put_entry, store_lease
from .reading import (
    SELECT_BATCH,
    SELECT_SESSION,
    Readers,
    entry_of,
    list_sessions,
    query_session,
)
from .schema import prepare, unavailable

__all__ = ["SQLiteBlocking"]

_ENTRY = (
    "SELECT number, key, body, created_at, consumed_at, outcome FROM inbox"
    " WHERE session = ? AND key = ?"
)


class SQLiteBlocking:
    """A SQLite journal opened for blocking calls (``open_blocking("sqlite:///x.db")``).

    Opening creates the file and its schema when missing, as ``open_journal`` does.
    """

    def __init__(self, location: JournalLocation) -> None:
        assert location.path is not None
        self.url, self.path = location.url, location.path
        self.max_entry_bytes = location.max_entry_bytes or MAX_ENTRY_BYTES
        self._conn = prepare(location.path, location.synchronous)
        self._lock = threading.Lock()
        self._readers = Readers(location.path, location.synchronous, "write", ())
        self._closed = False

    def put(
        self, session: str, key: str, command: InboxCommand, *, definition: str | None = None
    ) -> InboxEntry:
        check_text("session id", session)
        check_text("key", key)
        check_text("definition", definition)
        body = encode_command(command, session, self.max_entry_bytes)
        with self._lock:
            self._check_open()
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    now = time.time_ns()
                    found = conn.execute(
                        "SELECT 1 FROM sessions WHERE session = ?", (session,)
                    ).fetchone()
                    if found is None:
                        if definition is None:
                            raise SessionNotFoundError(session)
                        insert_session(conn, session, now)
                        store_lease(conn, session, 0, UNOWNED, definition)
                    row = put_entry(conn, session, key, body, now)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise unavailable(
                    exc, self.path, f"putting a command for session {session}"
                ) from exc
        return entry_of(session, row)

    def entry(self, session: str, key: str) -> InboxEntry | None:
        self._check_open()
        doing = f"reading the inbox of session {session}"
        rows = query_session(self._readers, self.path, session, doing, _ENTRY, (session, key))
        return entry_of(session, rows[0]) if rows else None

    def read(self, session: str, *, after: int = 0, limit: int = 512) -> list[Record]:
        after = max(after, 0)
        self._check_open()
        try:
            with self._readers.connection() as conn:
                exists, whole_from = conn.execute(SELECT_SESSION, (session, session)).fetchone()
                if not exists:
                    raise SessionNotFoundError(session)
                # From the record at ``after`` itself: its digest is what the next chains from.
                start = after - 1 if after else 0
                rows = conn.execute(SELECT_BATCH, (session, start, limit + bool(after))).fetchall()
        except sqlite3.Error as exc:
            raise unavailable(exc, self.path, f"reading session {session}") from exc
        previous = GENESIS
        if after:
            if not rows:
                return []
            if rows[0][0] != after:
                raise JournalCorruptError(session, after, "it is missing")
            previous, rows = rows[0][5], rows[1:]
        return chained_records(
            session, rows, after=after, previous=previous, whole_from=whole_from or 1
        )

    def sessions(self) -> list[SessionInfo]:
        self._check_open()
        return list_sessions(self._readers, self.path)

    def hosts(self) -> list[HostInfo]:
        self._check_open()
        try:
            with self._readers.connection() as conn:
                return list_hosts(conn)
        except sqlite3.Error as exc:
            raise unavailable(exc, self.path, "listing hosts") from exc

    def close(self) -> None:
        """Close the connections (a busy reader closes when it is handed back).  Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()
        self._readers.close()

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosedError(f"journal {self.url} is closed")
