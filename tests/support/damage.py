"""Damage a stored record the way a bad disk or a careless hand would.

Test-only: the production classes have no hook for it.  Each function
overwrites the stored event bytes of one record and leaves its digest and
every other column alone, straight in the backend's store: the memory
journal's rows, the SQLite file through a connection of its own, the
PostgreSQL table through a connection of its own.
"""

from __future__ import annotations

import sqlite3

import psycopg

from journal import Journal
from journal.memory import MemoryJournal
from journal.sqlite import SQLiteJournal

__all__ = ["damage_record", "damage_postgres_record"]


def damage_record(journal: Journal, session: str, seq: int, body: bytes) -> None:
    """Overwrite the body of record ``seq`` of ``session`` in an open memory or SQLite
    journal.  Synchronous and blocking (SQLite: its own connection, one commit)."""
    if isinstance(journal, MemoryJournal):
        rows = journal._sessions[session].rows
        rows[seq - 1] = (*rows[seq - 1][:7], body)
    elif isinstance(journal, SQLiteJournal):
        conn = sqlite3.connect(journal.path, isolation_level=None)
        try:
            conn.execute("PRAGMA busy_timeout = 10000")
            conn.execute(
                "UPDATE records SET body = ? WHERE session = ? AND seq = ?", (body, session, seq)
            )
        finally:
            conn.close()
    else:
        raise TypeError(f"no damage hook for {type(journal).__name__}")


def damage_postgres_record(url: str, session: str, seq: int, body: bytes) -> None:
    """Overwrite the body of record ``seq`` of ``session`` in the PostgreSQL journal
    at ``url`` (blocking: run it in a worker thread)."""
    with psycopg.connect(url, autocommit=True) as conn:
        updated = conn.execute(
            "UPDATE loopruntime_records SET body = %s WHERE session = %s AND seq = %s",
            (body, session, seq),
        ).rowcount
    assert updated == 1, f"no record {session}/{seq} to corrupt"
