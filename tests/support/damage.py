"""Damage a stored record the way a bad disk or a careless hand would.

Test-only: the production classes have no hook for it.  Each function
overwrites one column of one record (the event bytes, or ``id``, ``loop``,
``at`` or ``cause``) and leaves its digest and every other column alone,
straight in the backend's store: the memory journal's rows, the SQLite file
through a connection of its own, the PostgreSQL table through a connection
of its own.  ``damage_sqlite_page`` damages the file below the rows.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg

from journal import Journal
from journal.memory import MemoryJournal
from journal.sqlite import SQLiteJournal

__all__ = [
    "damage_blob",
    "damage_entry",
    "damage_postgres_blob",
    "damage_postgres_entry",
    "damage_postgres_record",
    "damage_record",
    "damage_sqlite_page",
    "edit_postgres_record",
    "edit_record",
    "expire_lease",
    "expire_postgres_lease",
]

_COLUMNS = {"id": 2, "loop": 3, "at": 4, "cause": 5}
"""The columns ``edit_record`` may change, by their place in a memory row."""


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


def damage_blob(journal: Journal, digest: bytes, body: bytes | None) -> None:
    """Overwrite the bytes of blob ``digest`` (``None``: delete it) in an open
    memory or SQLite journal, leaving the records that refer to it alone."""
    if isinstance(journal, MemoryJournal):
        assert digest in journal._blobs, f"no blob {digest.hex()}"
        if body is None:
            del journal._blobs[digest]
        else:
            journal._blobs[digest] = body
    elif isinstance(journal, SQLiteJournal):
        if body is None:
            changed = _sqlite_write(journal.path, "DELETE FROM blobs WHERE digest = ?", (digest,))
        else:
            changed = _sqlite_write(
                journal.path, "UPDATE blobs SET body = ? WHERE digest = ?", (body, digest)
            )
        assert changed == 1, f"no blob {digest.hex()}"
    else:
        raise TypeError(f"no damage hook for {type(journal).__name__}")


def damage_postgres_blob(url: str, digest: bytes, body: bytes | None) -> None:
    """``damage_blob`` for the PostgreSQL journal at ``url`` (blocking)."""
    with psycopg.connect(url, autocommit=True) as conn:
        if body is None:
            changed = conn.execute(
                "DELETE FROM loopruntime_blobs WHERE digest = %s", (digest,)
            ).rowcount
        else:
            changed = conn.execute(
                "UPDATE loopruntime_blobs SET body = %s WHERE digest = %s", (body, digest)
            ).rowcount
    assert changed == 1, f"no blob {digest.hex()}"


def damage_postgres_record(url: str, session: str, seq: int, body: bytes) -> None:
    """Overwrite the body of record ``seq`` of ``session`` in the PostgreSQL journal
    at ``url`` (blocking: run it in a worker thread)."""
    with psycopg.connect(url, autocommit=True) as conn:
        updated = conn.execute(
            "UPDATE loopruntime_records SET body = %s WHERE session = %s AND seq = %s",
            (body, session, seq),
        ).rowcount
    assert updated == 1, f"no record {session}/{seq} to corrupt"


def edit_record(journal: Journal, session: str, seq: int, column: str, value: object) -> None:
    """Overwrite ``column`` (``id``, ``loop``, ``at`` or ``cause``) of record ``seq``
    of ``session`` in an open memory or SQLite journal, as ``damage_record``."""
    place = _COLUMNS[column]
    if isinstance(journal, MemoryJournal):
        rows = journal._sessions[session].rows
        row = list(rows[seq - 1])
        row[place] = value
        rows[seq - 1] = tuple(row)  # type: ignore[assignment]
    elif isinstance(journal, SQLiteJournal):
        conn = sqlite3.connect(journal.path, isolation_level=None)
        try:
            conn.execute("PRAGMA busy_timeout = 10000")
            updated = conn.execute(
                f"UPDATE records SET {column} = ? WHERE session = ? AND seq = ?",
                (value, session, seq),
            ).rowcount
        finally:
            conn.close()
        assert updated == 1, f"no record {session}/{seq} to edit"
    else:
        raise TypeError(f"no damage hook for {type(journal).__name__}")


def edit_postgres_record(url: str, session: str, seq: int, column: str, value: object) -> None:
    """Overwrite one column of record ``seq`` of ``session`` in the PostgreSQL
    journal at ``url`` (blocking: run it in a worker thread)."""
    assert column in _COLUMNS, column
    with psycopg.connect(url, autocommit=True) as conn:
        updated = conn.execute(
            f"UPDATE loopruntime_records SET {column} = %s WHERE session = %s AND seq = %s",
            (value, session, seq),
        ).rowcount
    assert updated == 1, f"no record {session}/{seq} to edit"


def damage_sqlite_page(path: Path, name: str) -> int:
    """Overwrite the b-tree page header of the root page of table or index
    ``name`` in the closed SQLite file at ``path`` with bytes no page type
    has, as a bad sector would; returns the page number.  The file must be
    closed (no WAL left over)."""
    conn = sqlite3.connect(path)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)
        ).fetchone()[0]
    finally:
        conn.close()
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    with open(path, "r+b") as f:
        # Page 1 starts with the 100-byte file header; every other page with
        # its b-tree header.
        f.seek((root - 1) * page_size + (100 if root == 1 else 0))
        f.write(b"\xff" * 12)
    return int(root)


def _sqlite_write(path: str, statement: str, params: tuple[object, ...]) -> int:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 10000")
        return int(conn.execute(statement, params).rowcount)
    finally:
        conn.close()


def expire_lease(journal: Journal, session: str) -> None:
    """Move the expiry of the session's lease into the past, owner kept (memory or
    SQLite), as the passing of its ttl would."""
    if isinstance(journal, MemoryJournal):
        journal._sessions[session].expires_at = 1
    elif isinstance(journal, SQLiteJournal):
        updated = _sqlite_write(
            journal.path, "UPDATE leases SET expires_at = 1 WHERE session = ?", (session,)
        )
        assert updated == 1, f"session {session} has no lease to expire"
    else:
        raise TypeError(f"no lease hook for {type(journal).__name__}")


def expire_postgres_lease(url: str, session: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        updated = conn.execute(
            "UPDATE loopruntime_leases SET expires_at = 1 WHERE session = %s", (session,)
        ).rowcount
    assert updated == 1, f"session {session} has no lease to expire"


def damage_entry(journal: Journal, session: str, number: int, body: bytes) -> None:
    """Overwrite the stored command of inbox entry ``number`` (memory or SQLite)."""
    if isinstance(journal, MemoryJournal):
        journal._sessions[session].entries[number - 1].body = body
    elif isinstance(journal, SQLiteJournal):
        updated = _sqlite_write(
            journal.path,
            "UPDATE inbox SET body = ? WHERE session = ? AND number = ?",
            (body, session, number),
        )
        assert updated == 1, f"no inbox entry {session}/{number} to damage"
    else:
        raise TypeError(f"no damage hook for {type(journal).__name__}")


def damage_postgres_entry(url: str, session: str, number: int, body: bytes) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        updated = conn.execute(
            "UPDATE loopruntime_inbox SET body = %s WHERE session = %s AND number = %s",
            (body, session, number),
        ).rowcount
    assert updated == 1, f"no inbox entry {session}/{number} to damage"
