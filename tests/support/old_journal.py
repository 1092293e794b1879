"""Journals as older schema versions stored them, made from journals written today.

Schema 4 had no writers table (``Journal.writers``).  Schema 3 also had no
blob table (``journal.blobs``) and stored every record whole.  Schema 2
also chained each record's event bytes alone (``codec.chain_body``) and had
no ``chain_rule`` table; schema 1 also had no checkpoint index.  The
event bytes, the columns and every other table are the same, so rewriting a
journal written by today's code this way gives exactly the rows version-2
(or version-1) code would have stored for the same appends:

* ``to_version_4_sqlite`` / ``to_version_4_postgres``: the writers table
  dropped (what it held was never stored by version 4), ``schema_version`` 4;
* ``to_version_3_sqlite`` / ``to_version_3_postgres``: the (empty) blob
  table dropped, ``schema_version`` 3 (a journal holding blobs is refused:
  no older code could have written it);
* ``to_version_2_sqlite`` / ``to_version_2_postgres``: the same, then every digest
  re-chained over the bodies alone (and, in PostgreSQL, each session row's
  head digest with them), the chain-rule table dropped, ``schema_version`` 2;
* ``to_version_1_sqlite`` / ``to_version_1_postgres``: the same, then the
  (empty) checkpoint index dropped and ``schema_version`` 1.

Each works on a closed journal (SQLite) or one no process is writing to
(PostgreSQL), through a connection of its own, in one transaction.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg

from journal.codec import GENESIS, chain_body

__all__ = [
    "to_version_1_postgres",
    "to_version_1_sqlite",
    "to_version_2_postgres",
    "to_version_2_sqlite",
    "to_version_3_postgres",
    "to_version_3_sqlite",
    "to_version_4_postgres",
    "to_version_4_sqlite",
]


def _rechained(rows: list[tuple[str, int, bytes]]) -> dict[tuple[str, int], bytes]:
    """The body-only digest of each ``(session, seq, body)``, rows in seq order."""
    digests: dict[tuple[str, int], bytes] = {}
    previous: dict[str, bytes] = {}
    for session, seq, body in rows:
        digest = chain_body(previous.get(session, GENESIS), body)
        digests[(session, seq)] = previous[session] = digest
    return digests


def to_version_4_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DROP TABLE writers")
        conn.execute("UPDATE journal_meta SET value = '4' WHERE key = 'schema_version'")
        conn.execute("COMMIT")
    finally:
        conn.close()


def to_version_3_sqlite(path: Path) -> None:
    to_version_4_sqlite(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 0
        conn.execute("DROP TABLE blobs")
        conn.execute("UPDATE journal_meta SET value = '3' WHERE key = 'schema_version'")
        conn.execute("COMMIT")
    finally:
        conn.close()


def to_version_2_sqlite(path: Path) -> None:
    to_version_3_sqlite(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute("SELECT session, seq, body FROM records ORDER BY session, seq")
        digests = _rechained(rows.fetchall())
        conn.executemany(
            "UPDATE records SET digest = ? WHERE session = ? AND seq = ?",
            [(digest, session, seq) for (session, seq), digest in digests.items()],
        )
        conn.execute("DROP TABLE chain_rule")
        conn.execute("UPDATE journal_meta SET value = '2' WHERE key = 'schema_version'")
        conn.execute("COMMIT")
    finally:
        conn.close()


def to_version_1_sqlite(path: Path) -> None:
    to_version_2_sqlite(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        assert conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 0
        conn.execute("DROP TABLE checkpoints")
        conn.execute("UPDATE journal_meta SET value = '1' WHERE key = 'schema_version'")
        conn.execute("COMMIT")
    finally:
        conn.close()


def to_version_4_postgres(url: str) -> None:
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("DROP TRIGGER loopruntime_note_writers ON loopruntime_records")
        conn.execute("DROP FUNCTION loopruntime_note_writers()")
        conn.execute("DROP TABLE loopruntime_writers")
        conn.execute("UPDATE loopruntime_meta SET value = '4' WHERE key = 'schema_version'")


def to_version_3_postgres(url: str) -> None:
    to_version_4_postgres(url)
    with psycopg.connect(url) as conn, conn.transaction():
        row = conn.execute("SELECT count(*) FROM loopruntime_blobs").fetchone()
        assert row is not None and row[0] == 0
        conn.execute("DROP TABLE loopruntime_blobs")
        conn.execute("UPDATE loopruntime_meta SET value = '3' WHERE key = 'schema_version'")


def to_version_2_postgres(url: str) -> None:
    to_version_3_postgres(url)
    with psycopg.connect(url) as conn, conn.transaction():
        with conn.cursor(binary=True) as cur:
            rows = cur.execute(
                "SELECT session, seq, body FROM loopruntime_records ORDER BY session, seq"
            ).fetchall()
        digests = _rechained(rows)
        with conn.cursor() as cur:
            cur.executemany(
                "UPDATE loopruntime_records SET digest = %s WHERE session = %s AND seq = %s",
                [(digest, session, seq) for (session, seq), digest in digests.items()],
            )
            cur.executemany(
                "UPDATE loopruntime_sessions SET digest = %s WHERE session = %s AND head = %s",
                [(digest, session, seq) for (session, seq), digest in digests.items()],
            )
        conn.execute("DROP TABLE loopruntime_chain_rule")
        conn.execute("UPDATE loopruntime_meta SET value = '2' WHERE key = 'schema_version'")


def to_version_1_postgres(url: str) -> None:
    to_version_2_postgres(url)
    with psycopg.connect(url) as conn, conn.transaction():
        row = conn.execute("SELECT count(*) FROM loopruntime_checkpoints").fetchone()
        assert row is not None and row[0] == 0
        conn.execute("DROP TABLE loopruntime_checkpoints")
        conn.execute("UPDATE loopruntime_meta SET value = '1' WHERE key = 'schema_version'")
